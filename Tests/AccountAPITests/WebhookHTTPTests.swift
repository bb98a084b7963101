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

/// Events out: every event type reaches a local receiver once, signed per Standard Webhooks; failing receivers get the
/// same `webhook-id` again; SSRF targets are refused; rotation signs with both secrets for a day. On both engines.
@Suite("Webhooks over HTTP")
struct WebhookHTTPTests {
    struct Created: Decodable { let id: String; let secret: String; let events: [String] }
    struct Delivery: Decodable {
        let id: String; let eventId: String; let eventType: String; let status: String; let attempts: Int; let lastStatusCode: Int?
        let attemptLog: [Attempt]?
        struct Attempt: Decodable { let attempt: Int; let statusCode: Int? }
    }
    struct Deliveries: Decodable { let deliveries: [Delivery]; let nextCursor: String? }

    static func endpoint(
        _ client: any TestClientProtocol, admin: String, url: String, events: [String], threshold: Int? = nil
    ) async throws -> Created {
        let list = events.map { "\"\($0)\"" }.joined(separator: ",")
        let response = try await client.send(
            .post, "/api/admin/webhooks", token: admin,
            json: #"{"url":"\#(url)","events":[\#(list)]\#(threshold.map { ",\"balanceLowThreshold\":\($0)" } ?? "")}"#)
        #expect(response.status == .created, "\(String(buffer: response.body))")
        return try response.json(Created.self)
    }

    @Test(arguments: Engine.allCases)
    func everyEventTypeIsDeliveredOnceWithAValidSignature(engine: Engine) async throws {
        let receiver = WebhookReceiver()
        try await receiver.run { url in
            try await TestApp.run(engine, configure: TestApp.webhookConfig) { client, app in
                let admin = try await app.apiKey(["admin"])
                let ledgerKey = try await app.apiKey(["ledger:write"])
                let hook = try await Self.endpoint(client, admin: admin, url: url, events: WebhookEventType.subscribable, threshold: 10)
                #expect(hook.secret.hasPrefix("whsec_"))
                try await Self.causeEveryEvent(client, app, admin: admin, ledgerKey: ledgerKey)
                try await app.deliverWebhooks(app.webhookWorker(sender: WebhookReceiver.sender))
                let received = receiver.all
                for message in received {
                    #expect(
                        WebhookSigner.verify(
                            secret: hook.secret, id: message.id, timestamp: message.timestamp, body: message.body, header: message.signature))
                    #expect(!message.body.contains("password") && !message.body.contains("whsec_"))
                }
                #expect(Set(received.map(\.id)).count == received.count, "each event once")
                let types = Set(received.map(\.type))
                #expect(types == Set(WebhookEventType.subscribable), "missing: \(Set(WebhookEventType.subscribable).subtracting(types).sorted())")
                let spent = try #require(received.first { $0.type == "tokens.spent" && $0.data["idempotencyKey"] == .string("spend-1") })
                #expect(spent.data["amount"] == .integer(4) && spent.data["reason"] == .string("generation"))
                if case .object(let balances)? = spent.data["balances"] {
                    #expect(balances["totalTokens"] == .integer(19))
                } else {
                    Issue.record("balances")
                }
                let lows = received.filter { $0.type == "balance.low" }
                #expect(lows.count == 1, "one crossing below 10, one balance.low")
                let subscription = try #require(received.first { $0.type == "subscription.updated" && $0.data["cause"] == .string("operator.comp") })
                if case .object(let old)? = subscription.data["old"], case .object(let new)? = subscription.data["new"] {
                    #expect(old["planId"] != new["planId"])
                } else {
                    Issue.record("old/new")
                }
                // Nothing more to send: a second run delivers nothing again.
                try await app.deliverWebhooks(app.webhookWorker(sender: WebhookReceiver.sender))
                #expect(receiver.all.count == received.count)
            }
        }
    }

    /// One of each event: sign-up and verification, grants, spends, holds (captured, voided, expired), a comp, an unlock, a
    /// debit and a reversal, a refund clawback, and erasure.
    static func causeEveryEvent(_ client: any TestClientProtocol, _ app: TestApp, admin: String, ledgerKey: String) async throws {
        let token = try await client.signUpAndVerify(app, email: "hooks@example.com")
        let user = try await app.userID(token: token)
        func ledger(_ path: String, _ key: String, _ json: String) async throws {
            let response = try await client.ledger(path, key: ledgerKey, idempotencyKey: key, json: json)
            #expect(response.status.code < 300, "\(path): \(String(buffer: response.body))")
        }
        try await ledger("/api/ledger/grants", "grant-1", #"{"userId":"\#(user)","amount":20,"bucket":"purchased"}"#)  // 23
        try await ledger("/api/ledger/spend", "spend-1", #"{"userId":"\#(user)","amount":4,"reason":"generation"}"#)  // 19
        let hold = try await client.ledger(
            "/api/ledger/holds", key: ledgerKey, idempotencyKey: "hold-1", json: #"{"userId":"\#(user)","amount":2,"reason":"gen","ttlSeconds":60}"#)
        let holdID = try hold.json(HoldBody.self).id
        try await ledger("/api/ledger/holds/\(holdID)/capture", "cap-1", "{}")  // 17
        let second = try await client.ledger(
            "/api/ledger/holds", key: ledgerKey, idempotencyKey: "hold-2", json: #"{"userId":"\#(user)","amount":2,"reason":"gen","ttlSeconds":60}"#)
        try await ledger("/api/ledger/holds/\(try second.json(HoldBody.self).id)/void", "void-1", "{}")
        try await ledger("/api/ledger/holds", "hold-3", #"{"userId":"\#(user)","amount":1,"reason":"gen","ttlSeconds":1}"#)
        app.clock.advance(seconds: 5)
        #expect(try await client.createPack(admin, id: "holiday", premium: true, price: 5).status == .created)
        #expect(try await client.send(.post, "/api/stickers/packs/holiday/unlock", token: token).status == .ok)  // 12 (expired hold settled)
        let debit = try await client.send(
            .post, "/api/admin/users/\(user)/debits", token: admin, json: #"{"amount":3,"reason":"support correction"}"#,
            headers: [.idempotencyKey: "debit-1"])
        #expect(debit.status == .created, "\(String(buffer: debit.body))")  // 9: balance.low
        let history = try await client.get("/api/user/token-history", token: token).json(HistoryBody.self)
        let spendEntry = try #require(history.entries.first { $0.reason == "generation" })
        let reversed = try await client.send(
            .post, "/api/admin/ledger/transfers/\(spendEntry.id)/reverse", token: admin, json: #"{"reason":"failed generation"}"#)
        #expect(reversed.status == .created, "\(String(buffer: reversed.body))")
        #expect(try await client.comp(app, userID: user, plan: "pro_monthly", key: admin).status == .ok)
        // Ask to buy: a profile that cannot purchase asks for a pack.
        #expect(try await client.createPack(admin, id: "comet", premium: true, price: 1).status == .created)
        let owner = try await client.defaultProfileID(token)
        let kid = try await client.createProfile(token, #"{"name":"Kid","canMakePurchases":false}"#).json(ProfileBody.self).id
        #expect(try await client.selectProfile(token, kid).status == .ok)
        let asked = try await client.send(.post, "/api/stickers/packs/comet/unlock", token: token)
        #expect(asked.status == .accepted)
        #expect(try await client.selectProfile(token, owner).status == .ok)
        struct Asked: Decodable { struct Request: Decodable { let id: String }; let purchaseRequest: Request }
        let request = try asked.json(Asked.self).purchaseRequest.id
        #expect(try await client.send(.post, "/api/purchase-requests/\(request)/decline", token: token).status == .ok)
        try await app.dependencies.database.transaction(logger: TestDatabase.logger) { tx in
            _ = try await app.dependencies.ledger.ledger.clawback(tx, userID: user, amountTokens: 2, bucket: .purchased, reason: "refund")
        }
        // Another account is erased (an account erased before its sign-up events went out takes those events with it).
        let leaving = try await client.signUpAndVerify(app, email: "hooks-leaving@example.com")
        #expect(try await client.send(.delete, "/api/user/me", token: leaving, json: #"{"password":"correct horse battery"}"#).status == .noContent)
        // The test ping reaches its endpoint whatever it subscribes to.
        let hooks = try await client.get("/api/admin/webhooks", token: admin)
        #expect(hooks.status == .ok)
    }

    struct HoldBody: Decodable { let id: String }
    struct HistoryBody: Decodable { let entries: [Entry]; struct Entry: Decodable { let id: String; let reason: String } }

    @Test(arguments: Engine.allCases)
    func aFailingReceiverGetsTheEventOnTheThirdTryWithTheSameID(engine: Engine) async throws {
        let receiver = WebhookReceiver()
        try await receiver.run { url in
            try await TestApp.run(engine, configure: TestApp.webhookConfig) { client, app in
                let admin = try await app.apiKey(["admin"])
                let hook = try await Self.endpoint(client, admin: admin, url: url, events: ["user.created"])
                receiver.answer([500, 503, 200])
                _ = try await client.post("/api/auth/sign-up", json: #"{"email":"retry@example.com","password":"correct horse battery","name":"R"}"#)
                let worker = app.webhookWorker(sender: WebhookReceiver.sender)
                try await app.deliverWebhooks(worker)
                #expect(receiver.all.count == 1)
                for _ in 0..<2 {
                    app.clock.advance(seconds: 3600)
                    try await app.deliverWebhooks(worker)
                }
                let tries = receiver.all
                #expect(tries.count == 3 && Set(tries.map(\.id)).count == 1 && Set(tries.map(\.body)).count == 1)
                let page = try await client.get("/api/admin/webhooks/\(hook.id)/deliveries", token: admin).json(Deliveries.self)
                let delivery = try #require(page.deliveries.first)
                #expect(delivery.status == "delivered" && delivery.attempts == 3 && delivery.lastStatusCode == 200)
                let detail = try await client.get("/api/admin/webhooks/\(hook.id)/deliveries/\(delivery.id)", token: admin).json(Delivery.self)
                #expect(detail.attemptLog?.map(\.statusCode) == [500, 503, 200])
                // An operator's retry sends it again with the same id; a test ping goes out too.
                #expect(
                    try await client.send(.post, "/api/admin/webhooks/\(hook.id)/deliveries/\(delivery.id)/retry", token: admin).status == .accepted)
                #expect(try await client.send(.post, "/api/admin/webhooks/\(hook.id)/test", token: admin).status == .accepted)
                try await app.deliverWebhooks(worker)
                let resent = receiver.all.dropFirst(3)
                #expect(resent.count == 2 && resent.contains { $0.id == tries[0].id } && resent.contains { $0.type == "webhook.test" })
                // 410: the delivery fails and the endpoint is disabled; later events are not queued for it.
                receiver.answer([410])
                _ = try await client.post("/api/auth/sign-up", json: #"{"email":"gone@example.com","password":"correct horse battery","name":"G"}"#)
                try await app.deliverWebhooks(worker)
                let endpoint = try await client.get("/api/admin/webhooks/\(hook.id)", token: admin)
                #expect(try endpoint.json(EndpointBody.self).enabled == false)
                _ = try await client.post("/api/auth/sign-up", json: #"{"email":"later@example.com","password":"correct horse battery","name":"L"}"#)
                try await app.deliverWebhooks(worker)
                #expect(receiver.all.count == 6)
                // A receiver that never answers well: failed once the retry window has passed.
                let patched = try await client.send(.patch, "/api/admin/webhooks/\(hook.id)", token: admin, json: #"{"enabled":true}"#)
                #expect(try patched.json(EndpointBody.self).enabled == true)
                receiver.answer(Array(repeating: 500, count: 100))
                _ = try await client.post("/api/auth/sign-up", json: #"{"email":"never@example.com","password":"correct horse battery","name":"N"}"#)
                for _ in 0..<30 {
                    try await app.deliverWebhooks(worker)
                    app.clock.advance(seconds: 6 * 3600)
                }
                let failed = try await client.get("/api/admin/webhooks/\(hook.id)/deliveries?status=failed", token: admin).json(Deliveries.self)
                #expect(failed.deliveries.map(\.lastStatusCode).sorted { ($0 ?? 0) < ($1 ?? 0) } == [410, 500])
                #expect(failed.deliveries.contains { $0.status == "failed" && $0.lastStatusCode == 500 && $0.attempts > 5 })
            }
        }
    }

    /// A receiver that answers at once and then trickles its body is cut off at the try's time limit.
    @Test func aTricklingReceiverIsCutOffAtTheTimeLimit() async throws {
        let receiver = WebhookReceiver()
        try await receiver.run { url in
            let started = ContinuousClock.now
            let outcome = await WebhookReceiver.sender.send(
                url: url.replacingOccurrences(of: "/hook", with: "/trickle"), headers: [], body: "{}", timeoutSeconds: 1)
            #expect(outcome != .status(200), "\(outcome)")
            // Cut off near the 1 s limit, not after the 1,000 s the body would take; the bound leaves room for a loaded
            // machine (a full parallel suite once measured 8.3 s here).
            #expect(ContinuousClock.now - started < .seconds(30), "cut off at about the limit, not after the 1,000 s the body would take")
        }
    }

    /// Parallel creates on PostgreSQL count one at a time: never more than the limit of endpoints.
    @Test func parallelCreatesStayWithinTheEndpointLimit() async throws {
        try await TestApp.run(.postgres, configure: TestApp.webhookConfig) { client, app in
            let admin = try await app.apiKey(["admin"])
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<60 {
                    group.addTask {
                        // The creates queue on one lock; on a loaded machine one may wait past the pool's lease and get 503
                        // (an outage answer, written nothing), which a client retries.
                        for _ in 0..<5 {
                            let status = try await client.send(
                                .post, "/api/admin/webhooks", token: admin, json: #"{"url":"http://127.0.0.1:9/hook","events":["user.created"]}"#
                            ).status.code
                            if status != 503 { return status }
                        }
                        return 503
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == 201 }.count == 50 && statuses.filter { $0 == 400 }.count == 10)
        }
    }

    struct EndpointBody: Decodable { let id: String; let enabled: Bool; let previousSecretExpiresAt: String? }

    @Test(arguments: Engine.allCases)
    func unsafeTargetsAndBadInputAreRefused(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let admin = try await app.apiKey(["admin"])
            let user = try await client.signUpAndVerify(app, email: "nothook@example.com")
            for url in [
                "http://127.0.0.1:9/hook", "https://127.0.0.1/hook", "https://10.1.2.3/hook", "https://169.254.169.254/latest", "https://[::1]/hook",
                "https://[::ffff:127.0.0.1]/x", "https://user:pw@example.com/x", "ftp://example.com/x", "https://localhost/x", "not a url",
                "https://192.168.0.1/x", "https://" + String(repeating: "a", count: 2100) + ".com/", "https://[::127.0.0.1]/", "https://[::7f00:1]/",
                "https://[64:ff9b:1::7f00:1]/", "https://[2002:7f00:1::]/", "https://[fec0::1]/", "https://[2001::1]/", "https://192.88.99.1/",
                "http://2130706433/", "https://0x7f.1/", "https://127.1/",
            ] {
                let response = try await client.send(
                    .post, "/api/admin/webhooks", token: admin, json: #"{"url":"\#(url)","events":["user.created"]}"#)
                #expect(response.status == .badRequest, "\(url)")
            }
            let cases = [
                #"{"url":"https://127.0.0.1/x","events":[]}"#, #"{"url":"https://127.0.0.1/x","events":["tokens.minted"]}"#,
                #"{"url":"https://127.0.0.1/x","events":["balance.low"]}"#, #"{"events":["user.created"]}"#,
            ]
            for json in cases { #expect(try await client.send(.post, "/api/admin/webhooks", token: admin, json: json).status == .badRequest) }
            #expect(try await client.send(.post, "/api/admin/webhooks", token: user, json: cases[0]).status == .forbidden)
            #expect(try await client.send(.get, "/api/admin/webhooks", token: nil).status == .unauthorized)
            #expect(try await client.get("/api/admin/webhooks/whe_nope", token: admin).status == .notFound)
            #expect(try await app.rows("SELECT id FROM webhook_endpoints").isEmpty)
        }
    }

    @Test(arguments: Engine.allCases)
    func rotationSignsWithBothSecretsForADay(engine: Engine) async throws {
        let receiver = WebhookReceiver()
        try await receiver.run { url in
            try await TestApp.run(engine, configure: TestApp.webhookConfig) { client, app in
                let admin = try await app.apiKey(["admin"])
                let hook = try await Self.endpoint(client, admin: admin, url: url, events: ["user.created"])
                let rotated = try await client.send(.post, "/api/admin/webhooks/\(hook.id)/rotate-secret", token: admin)
                let newSecret = try rotated.json(Created.self).secret
                #expect(try newSecret != hook.secret && rotated.json(EndpointBody.self).previousSecretExpiresAt != nil)
                #expect(
                    try await app.rows("SELECT secret_sealed FROM webhook_endpoints").allSatisfy {
                        !((try? $0.string("secret_sealed")) ?? "").contains("whsec_")
                    })
                let worker = app.webhookWorker(sender: WebhookReceiver.sender)
                _ = try await client.post("/api/auth/sign-up", json: #"{"email":"r1@example.com","password":"correct horse battery","name":"R"}"#)
                try await app.deliverWebhooks(worker)
                let first = try #require(receiver.all.last)
                #expect(first.signature.split(separator: " ").count == 2)
                for secret in [hook.secret, newSecret] {
                    #expect(WebhookSigner.verify(secret: secret, id: first.id, timestamp: first.timestamp, body: first.body, header: first.signature))
                }
                app.clock.advance(seconds: 25 * 3600)
                _ = try await client.post("/api/auth/sign-up", json: #"{"email":"r2@example.com","password":"correct horse battery","name":"R"}"#)
                try await app.deliverWebhooks(worker)
                let later = try #require(receiver.all.last)
                #expect(later.id != first.id && later.signature.split(separator: " ").count == 1)
                #expect(WebhookSigner.verify(secret: newSecret, id: later.id, timestamp: later.timestamp, body: later.body, header: later.signature))
                #expect(
                    !WebhookSigner.verify(secret: hook.secret, id: later.id, timestamp: later.timestamp, body: later.body, header: later.signature))
                #expect(try await client.send(.delete, "/api/admin/webhooks/\(hook.id)", token: admin).status == .noContent)
                #expect(try await client.send(.delete, "/api/admin/webhooks/\(hook.id)", token: admin).status == .notFound)
            }
        }
    }
}
