import Clock
import Foundation
import HTTPTypes
import HummingbirdTesting
import Ledger
import NIOCore
import Storage
import TestSupport
import Testing
import Webhooks

@testable import AccountAPI

/// Erasure against what keeps crediting or charging an account (an outside tester's findings): writes racing it, its
/// subscription, its provider purchases and the service's view of it.
@Suite("Erasure and money-like state over HTTP")
struct ErasureHTTPTests {
    /// A grant that asks whether the account is live while an erasure is under way waits for it (the account row is
    /// share-locked by the question), then finds the account erased: 404, nothing posted. Before, on PostgreSQL, the grant
    /// read the row as live, posted after the erasure's forfeit, and the erased account kept the tokens.
    @Test(arguments: TestDatabase.engines)
    func aWriteRacingAnErasureWaitsAndFindsItErased(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "erase-race@example.com")
            let user = try await app.userID(token: token)
            let ledgerKey = try await app.apiKey(["ledger:write"])
            func balance() async throws -> Int64 {
                try await app.rows("SELECT COALESCE(SUM(balance), 0) AS b FROM ledger_accounts WHERE user_id = ?", [user])[0].int("b")
            }
            let before = try await balance()
            let (erasing, erasingNow) = AsyncStream<Void>.makeStream()
            let erasure = Task {
                try await app.dependencies.database.transaction(logger: TestDatabase.logger) { tx in
                    try await tx.query("UPDATE users SET deleted_at_ms = ?, email = NULL WHERE id = ?", [app.clock.now(), user])
                    erasingNow.yield()
                    try await Task.sleep(for: .milliseconds(500))  // the grant is under way meanwhile
                }
            }
            for await _ in erasing { break }
            let grant = try await client.ledger(
                "/api/ledger/grants", key: ledgerKey, idempotencyKey: "late", json: #"{"userId":"\#(user)","amount":20,"bucket":"purchased"}"#)
            try await erasure.value
            #expect(grant.status == .notFound)
            #expect(try await balance() == before, "nothing posted for the erased account")
        }
    }

    /// Erasure ends the account's subscription (a yearly plan's drip credits it no more), unbinds its provider purchases,
    /// and the service's read of its entitlements answers 404 as for an id that never existed.
    @Test(arguments: TestDatabase.engines)
    func erasureEndsTheSubscriptionAndUnbindsPurchases(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "erase-plan@example.com")
            let user = try await app.userID(token: token)
            let admin = try await app.apiKey(["admin"])
            let reader = try await app.apiKey(["entitlements:read"])
            #expect(try await client.comp(app, userID: user, plan: "pro_monthly", key: admin).status == .ok)
            try await app.dependencies.database.transaction(logger: TestDatabase.logger) { tx in
                try await tx.query(
                    "INSERT INTO billing_accounts (provider, external_id, user_id, environment, created_at_ms) VALUES ('apple', '2000000123', ?, NULL, 0)",
                    [user])
            }
            #expect(try await client.get("/api/users/\(user)/entitlements", token: reader).status == .ok)
            #expect(
                try await client.send(.delete, "/api/user/me", token: token, json: #"{"password":"correct horse battery"}"#).status == .noContent)
            let subscription = try await app.rows("SELECT status, will_renew FROM subscriptions WHERE user_id = ?", [user])
            #expect(try subscription.first?.string("status") == "expired" && subscription.first?.bool("will_renew") == false)
            #expect(try await app.rows("SELECT user_id FROM billing_accounts WHERE user_id = ?", [user]).isEmpty)
            let erased = try await client.get("/api/users/\(user)/entitlements", token: reader)
            let unknown = try await client.get("/api/users/\(UUID().uuidString.lowercased())/entitlements", token: reader)
            #expect(erased.status == .notFound && unknown.status == .notFound)
            #expect(try erased.problem().detail == unknown.problem().detail)
            #expect(try await client.comp(app, userID: user, plan: "pro_monthly", key: admin).status == .notFound)
            #expect(try await app.dependencies.ledger.verify(logger: TestDatabase.logger).ok)
        }
    }
}

extension ErasureHTTPTests {
    /// A test app whose webhook endpoint, at a local receiver, takes `events`.
    static func withHook(
        _ engine: Engine, events: [String], _ body: @escaping @Sendable (any TestClientProtocol, TestApp, WebhookReceiver) async throws -> Void
    ) async throws {
        let receiver = WebhookReceiver()
        try await receiver.run { url in
            try await TestApp.run(engine, configure: TestApp.webhookConfig) { client, app in
                _ = try await WebhookHTTPTests.endpoint(client, admin: try await app.apiKey(["admin"]), url: url, events: events)
                try await body(client, app, receiver)
            }
        }
    }

    /// An erased account's address leaves the bodies of its `user.created` and `user.verified` deliveries, the delivered
    /// ones and any still queued (an outside tester read it there after the erasure); the rest of each body stays.
    @Test(arguments: TestDatabase.engines)
    func erasureRedactsTheAddressFromWebhookBodies(engine: Engine) async throws {
        try await Self.withHook(engine, events: ["user.created", "user.verified"]) { client, app, receiver in
            let token = try await client.signUpAndVerify(app, email: "hooked@example.com")
            let user = try await app.userID(token: token)
            try await app.deliverWebhooks(app.webhookWorker(sender: WebhookReceiver.sender))
            let before = try await app.rows("SELECT body FROM webhook_deliveries WHERE user_id = ? ORDER BY event_type", [user])
            #expect(before.count == 2)
            #expect(try before.allSatisfy { try $0.string("body").contains("hooked@example.com") })
            #expect(
                try await client.send(.delete, "/api/user/me", token: token, json: #"{"password":"correct horse battery"}"#).status == .noContent)
            let after = try await app.rows("SELECT body FROM webhook_deliveries WHERE user_id = ? ORDER BY event_type", [user])
            #expect(after.count == 2)
            for row in after {
                let body = try row.string("body")
                #expect(!body.contains("hooked@example.com") && body.contains(#""email":null"#) && body.contains(user), "\(body)")
            }
            // Erased before its events were fanned out: they are dropped, never delivered.
            let late = try await client.signUpAndVerify(app, email: "hooked-late@example.com")
            let lateID = try await app.userID(token: late)
            #expect(
                try await client.send(.delete, "/api/user/me", token: late, json: #"{"password":"correct horse battery"}"#).status == .noContent)
            try await app.deliverWebhooks(app.webhookWorker(sender: WebhookReceiver.sender))
            #expect(try await app.rows("SELECT id FROM webhook_deliveries WHERE user_id = ? AND event_type <> 'user.deleted'", [lateID]).isEmpty)
            #expect(!receiver.all.contains { $0.body.contains("hooked-late@example.com") })
            #expect(WebhookService.redacted(#"{"email":"a\"b@x.com","emailVerified":true}"#) == #"{"email":null,"emailVerified":true}"#)
        }
    }

    /// A pending sign-up released because somebody proved they own the address (here by an email change) is closed like
    /// an erasure: its delivered `user.created` no longer carries the address it never verified.
    @Test(arguments: TestDatabase.engines)
    func aReleasedPendingSignUpIsRedactedFromWebhookBodies(engine: Engine) async throws {
        try await Self.withHook(engine, events: ["user.created"]) { client, app, _ in
            try await client.post("/api/auth/sign-up", json: #"{"email":"claimed@example.com","password":"squatters passphrase","name":"S"}"#)
            try await app.deliverWebhooks(app.webhookWorker(sender: WebhookReceiver.sender))
            let pending = try #require(try await app.rows("SELECT user_id FROM webhook_deliveries WHERE body LIKE '%claimed@example.com%'").first)
            let pendingID = try pending.string("user_id")
            let token = try await client.signUpAndVerify(app, email: "owner@example.com")
            app.clock.advance(seconds: 61)  // the address's mail cooldown, after the pending sign-up's code
            let asked = try await client.send(
                .post, "/api/user/email", token: token, json: #"{"newEmail":"claimed@example.com","currentPassword":"correct horse battery"}"#)
            #expect(asked.status == .accepted)
            let code = try await app.lastCode(to: "claimed@example.com")
            #expect(try await client.send(.post, "/api/user/email/verify", token: token, json: #"{"code":"\#(code)"}"#).status == .ok)
            let bodies = try await app.rows("SELECT body FROM webhook_deliveries WHERE user_id = ?", [pendingID]).map { try $0.string("body") }
            #expect(!bodies.isEmpty && bodies.allSatisfy { !$0.contains("claimed@example.com") && $0.contains(#""email":null"#) }, "\(bodies)")
        }
    }
}

/// Headers that mean one thing, sent twice, and a unique value claimed by two requests at once.
@Suite("Repeated headers and parallel claims over HTTP")
struct RepeatedClaimsHTTPTests {
    /// Two `Idempotency-Key`s were keyed on their join (`k1, k2`), so a retry carrying either alone spent again; two
    /// `Authorization`s or `Content-Type`s are refused the same way, before anything reads them.
    @Test(arguments: TestDatabase.engines)
    func headersThatMeanOneThingAreSentOnce(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "twice@example.com")
            let user = try await app.userID(token: token)
            let ledgerKey = try await app.apiKey(["ledger:write"])
            let grant = #"{"userId":"\#(user)","amount":5,"bucket":"purchased"}"#
            // A Host among the fields is a second one: the first became the request's authority.
            let pairs: [(HTTPField.Name, [String])] = [
                (.idempotencyKey, ["k1", "k2"]), (.authorization, ["Bearer \(ledgerKey)", "Bearer x"]), (.host, ["other.example"]),
            ]
            for (name, values) in pairs {
                var headers = HTTPFields()
                if name != .authorization { headers[.authorization] = "Bearer \(ledgerKey)" }
                if name != .idempotencyKey { headers[.idempotencyKey] = "once" }
                headers[.contentType] = "application/json"
                for value in values { headers.append(HTTPField(name: name, value: value)) }
                let answer = try await client.execute(uri: "/api/ledger/grants", method: .post, headers: headers, body: ByteBuffer(string: grant))
                #expect(answer.status == .badRequest && answer.headers[.contentType] == "application/problem+json", "\(name)")
                #expect(try answer.problem().detail.contains(name.canonicalName), "\(name)")
            }
            #expect(try await client.balance(token).totalTokens == 3, "nothing granted")
            #expect(SingleHeadersMiddleware.repeated([.contentType: "a", .accept: "b"]) == nil)
        }
    }

    /// Two accounts confirming a change to the same address at once: one gets it, the other 409 (a unique violation
    /// used to reach the client as 500 on PostgreSQL); any other unique violation that reaches HTTP is 409 too.
    @Test(arguments: TestDatabase.engines)
    func twoChangesToOneAddressAtOnceGiveOneChangeAndA409(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            var tokens: [String] = []
            var codes: [String] = []
            for name in ["first", "second"] {
                let token = try await client.signUpAndVerify(app, email: "\(name)-move@example.com")
                let asked = try await client.send(
                    .post, "/api/user/email", token: token, json: #"{"newEmail":"contested@example.com","currentPassword":"correct horse battery"}"#)
                #expect(asked.status == .accepted)
                tokens.append(token)
                codes.append(try await app.lastCode(to: "contested@example.com"))
                app.clock.advance(seconds: 180)  // past the address's mail budget for the next request
            }
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for (token, code) in zip(tokens, codes) {
                    group.addTask {
                        try await client.send(.post, "/api/user/email/verify", token: token, json: #"{"code":"\#(code)"}"#).status.code
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.sorted() == [200, 409], "\(statuses)")
            #expect(try await app.rows("SELECT id FROM users WHERE email = 'contested@example.com'").count == 1)
        }
    }
}
