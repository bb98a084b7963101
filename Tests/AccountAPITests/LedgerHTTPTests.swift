import Auth
import Clock
import Foundation
import HTTPTypes
import HummingbirdTesting
import Ledger
import Logging
import NIOCore
import Storage
import Synchronization
import TestSupport
import Testing

@testable import AccountAPI

@Suite("Token ledger over HTTP")
struct LedgerHTTPTests {
    /// What a refund question is answered from: purchased tokens a pending hold reserved count as used (an outside
    /// reviewer held a whole pack while Apple asked, so the pack was reported untouched).
    @Test(arguments: TestDatabase.engines)
    func heldPurchasedTokensCountAsUsed(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "held@example.com")
            let user = try await app.userID(token: token)
            let key = try await app.apiKey(["ledger:write"])
            _ = try await client.ledger(
                "/api/ledger/grants", key: key, idempotencyKey: "g1", json: #"{"userId":"\#(user)","amount":100,"bucket":"purchased"}"#)
            _ = try await client.ledger(
                "/api/ledger/holds", key: key, idempotencyKey: "h1", json: #"{"userId":"\#(user)","amount":60,"reason":"job","ttlSeconds":60}"#)
            let ledger = app.dependencies.ledger.ledger
            let unspent = try await app.dependencies.database.transaction(logger: Logger(label: "test")) { tx in
                try await ledger.purchasedUnspent(tx, userID: user)
            }
            // Whatever the hold took from the pack (after the sign-up bonus) is not reported as unused.
            let balance = try await client.balance(token)
            #expect(unspent < 100 && unspent == balance.purchasedTokens && balance.heldTokens == 60)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func grantsSpendsAndIdempotency(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "l1@example.com")
            let user = try await app.userID(token: token)
            let key = try await app.apiKey(["ledger:write"])
            // Welcome tokens arrived through the ledger, in the bonus bucket.
            let welcome = try await client.get("/api/user/token-balance", token: token)
            let seed = try welcome.json(SeedTokenBalance.self)
            #expect(seed.totalTokens == 3 && seed.currentPlan?.id == "free" && seed.maxRollover == 0)
            #expect(try welcome.json(BalanceBody.self).bonusTokens == 3)

            let grantBody = #"{"userId":"\#(user)","amount":20,"bucket":"purchased","reason":"pack","metadata":{"order":"A-1"}}"#
            let grant = try await client.ledger("/api/ledger/grants", key: key, idempotencyKey: "g-1", json: grantBody)
            #expect(grant.status == .created)
            struct Result: Decodable { let operationId: String; let balances: BalanceBody }
            let granted = try grant.json(Result.self)
            #expect(granted.balances.totalTokens == 23 && granted.balances.purchasedTokens == 20)
            // The same key and body replays the stored response; the balance moved once.
            let replay = try await client.ledger("/api/ledger/grants", key: key, idempotencyKey: "g-1", json: grantBody)
            #expect(replay.status == .created && replay.text == grant.text)
            #expect(replay.headers[.idempotentReplayed] == "true")
            // The same key with another body is a conflict naming the fields.
            let conflict = try await client.ledger(
                "/api/ledger/grants", key: key, idempotencyKey: "g-1", json: #"{"userId":"\#(user)","amount":21,"bucket":"bonus","reason":"pack"}"#)
            #expect(conflict.status == .conflict)
            struct Fields: Decodable { let code: String; let fields: [String] }
            let fields = try conflict.json(Fields.self)
            #expect(fields.code == "idempotency_conflict" && fields.fields == ["amount", "bucket", "metadata"])
            // Another caller's key space is separate.
            let otherKey = try await app.apiKey(["ledger:write"])
            #expect(try await client.ledger("/api/ledger/grants", key: otherKey, idempotencyKey: "g-1", json: grantBody).status == .created)

            // Spend order: bonus first, then purchased.
            let spend = try await client.ledger(
                "/api/ledger/spend", key: key, idempotencyKey: "s-1", json: #"{"userId":"\#(user)","amount":5,"reason":"generation"}"#)
            #expect(spend.status == .ok)
            #expect(
                try spend.json(Result.self).balances
                    == BalanceBody(bonusTokens: 0, subscriptionTokens: 0, purchasedTokens: 38, heldTokens: 0, totalTokens: 38))
            // Not enough: 402 with the available amount, remembered: the retry fails the same even after a grant.
            let tooMuch = #"{"userId":"\#(user)","amount":100,"reason":"generation"}"#
            let refused = try await client.ledger("/api/ledger/spend", key: key, idempotencyKey: "s-2", json: tooMuch)
            #expect(refused.status.code == 402)
            struct Available: Decodable { let code: String; let availableTokens: Int }
            #expect(try refused.json(Available.self).availableTokens == 38)
            _ = try await client.ledger(
                "/api/ledger/grants", key: key, idempotencyKey: "g-2", json: #"{"userId":"\#(user)","amount":100,"bucket":"purchased"}"#)
            let retried = try await client.ledger("/api/ledger/spend", key: key, idempotencyKey: "s-2", json: tooMuch)
            #expect(retried.status.code == 402 && retried.text == refused.text)
            #expect(try await client.get("/api/user/token-balance", token: token).json(BalanceBody.self).totalTokens == 138)
        }
    }

    /// The test app with webhooks to loopback allowed, and the one-statement spend on or off.
    static func withWebhooks(oneStatementSpends: Bool) -> @Sendable (inout AppConfig) -> Void {
        { config in
            TestApp.webhookConfig(&config)
            config.oneStatementSpends = oneStatementSpends
        }
    }

    /// PostgreSQL answers common spends with one statement (`ledger_spend_once`); the same requests with it turned
    /// off must give the same statuses and bodies (ids aside), replays and conflicts included, also when it declines
    /// (a lapsed bonus lot to settle, too few tokens). On SQLite both runs take the transactional path.
    @Test(arguments: TestDatabase.engines)
    func oneStatementSpendsAnswerLikeTheTransactionalPath(engine: Engine) async throws {
        let runs = Mutex<[Bool: [String]]>([:])
        for oneStatement in [true, false] {
            try await TestApp.run(engine, configure: Self.withWebhooks(oneStatementSpends: oneStatement)) { client, app in
                let token = try await client.signUpAndVerify(app, email: "one@example.com")
                let user = try await app.userID(token: token)
                let key = try await app.apiKey(["ledger:write"])
                var answers: [String] = []
                func send(_ path: String, _ idempotencyKey: String, _ json: String) async throws {
                    let response = try await client.ledger(path, key: key, idempotencyKey: idempotencyKey, json: json)
                    let body = response.text.replacingOccurrences(
                        of: #""(operationId|id|userId|expiresAt|holdId)":"[^"]*""#, with: #""$1":"_""#, options: .regularExpression)
                    answers.append("\(response.status.code) \(response.headers[.idempotentReplayed] ?? "-") \(body)")
                }
                let spendsBefore = try await client.oneStatementSpends()
                let soon = ISODate.string(app.clock.now().addingTimeInterval(60))
                try await send("/api/ledger/grants", "g1", #"{"userId":"\#(user)","amount":10,"bucket":"bonus","expiresAt":"\#(soon)"}"#)
                try await send("/api/ledger/grants", "g2", #"{"userId":"\#(user)","amount":20,"bucket":"purchased"}"#)
                try await send("/api/ledger/grants", "g3", #"{"userId":"\#(user)","amount":7,"bucket":"subscription"}"#)
                let spend = { (amount: Int) in #"{"userId":"\#(user)","amount":\#(amount),"reason":"generation","metadata":{"job":"j-\#(amount)"}}"# }
                try await send("/api/ledger/spend", "s1", spend(4))
                try await send("/api/ledger/spend", "s2", spend(12))
                try await send("/api/ledger/spend", "s2", spend(12))  // replay
                try await send("/api/ledger/spend", "s2", spend(13))  // conflict
                try await send("/api/ledger/holds", "h1", #"{"userId":"\#(user)","amount":2,"reason":"job"}"#)
                try await send("/api/ledger/spend", "s3", spend(1))
                try await send("/api/ledger/grants", "g4", #"{"userId":"\#(user)","amount":5,"bucket":"bonus","expiresAt":"\#(soon)"}"#)
                app.clock.advance(seconds: 120)  // the bonus lot lapses: the next spend settles it first
                try await send("/api/ledger/spend", "s4", spend(1))
                try await send("/api/ledger/spend", "s5", spend(1000))  // too few tokens: 402, remembered
                try await send("/api/ledger/spend", "s5", spend(1000))
                try await send("/api/ledger/spend", "s6", spend(2))
                for round in 0..<6 {  // without metadata first, then alternating: the same statement binds NULL, then text
                    let plain = #"{"userId":"\#(user)","amount":1,"reason":"generation"}"#
                    try await send("/api/ledger/spend", "m\(round)", round % 2 == 0 ? plain : spend(1))
                    #expect(answers.last?.hasPrefix("200 ") == true, "\(answers.last ?? "")")
                }
                // Metadata with a NUL (jsonb refuses it), with its event recorded for an endpoint: spent, then replayed.
                _ = try await WebhookHTTPTests.endpoint(
                    client, admin: try await app.apiKey(["admin"]), url: "http://127.0.0.1:9/hook", events: ["tokens.spent"])
                for (index, metadata) in [#"{"k":"a\u0000b"}"#, #"{"k\u0000":1}"#].enumerated() {
                    let odd = #"{"userId":"\#(user)","amount":1,"reason":"generation","metadata":\#(metadata)}"#
                    for _ in 0..<2 { try await send("/api/ledger/spend", "nul\(index)", odd) }
                    #expect(answers.suffix(2).map { String($0.prefix(6)) } == ["200 - ", "200 tr"], "\(answers.suffix(2))")
                }
                let report = try await app.dependencies.ledger.verify(logger: TestDatabase.logger)
                #expect(report.ok, "\(report.differences)")
                if engine == .postgres && oneStatement {
                    // s1, s2, s3 and s6 took the one statement (other tests may add to the process-wide counter).
                    #expect(try await client.oneStatementSpends() - spendsBefore >= 4)
                }
                // The key's use was recorded; once revoked it spends nothing, on either path.
                let keys = try await app.dependencies.apiKeys.list(logger: TestDatabase.logger)
                let spender = try #require(keys.first { $0.scopes.contains("ledger:write") })
                #expect(keys.count == 2 && spender.lastUsedAt != nil)
                #expect(try await app.dependencies.apiKeys.revoke(id: spender.id, logger: TestDatabase.logger))
                let revoked = try await client.ledger("/api/ledger/spend", key: key, idempotencyKey: "s7", json: spend(1))
                #expect(revoked.status == .unauthorized)
                let replayAfterRevoke = try await client.ledger("/api/ledger/spend", key: key, idempotencyKey: "s6", json: spend(2))
                #expect(replayAfterRevoke.status == .unauthorized)
                runs.withLock { $0[oneStatement] = answers }
            }
        }
        let (with, without) = runs.withLock { ($0[true] ?? [], $0[false] ?? []) }
        #expect(with.count == 24 && with == without, "\(with)\n\(without)")
        // 3 welcome + 10 + 20 + 7 + 5 granted; 4 + 12 + 1 + 1 + 2 + 6 × 1 + 2 × 1 spent, 2 held, 5 lapsed.
        let last = #"{"bonusTokens":0,"heldTokens":2,"purchasedTokens":10,"subscriptionTokens":0,"totalTokens":10}"#
        #expect(with.last?.contains(last) == true, "\(with.last ?? "")")
        #expect(with.filter { $0.hasPrefix("402 ") }.count == 2 && with.filter { $0.hasPrefix("409 ") }.count == 1)
    }

    @Test(arguments: TestDatabase.engines)
    func callersAndInputsAreChecked(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "l2@example.com")
            let user = try await app.userID(token: token)
            let key = try await app.apiKey(["ledger:write"])
            let readOnly = try await app.apiKey(["entitlements:read"])
            let body = #"{"userId":"\#(user)","amount":5,"reason":"generation"}"#
            #expect(try await client.ledger("/api/ledger/spend", key: nil, idempotencyKey: "k", json: body).status == .unauthorized)
            // A user's live session is not an API key: 403 api_key_required (an app must not sign its user out over it).
            let withSession = try await client.ledger("/api/ledger/spend", key: token, idempotencyKey: "k", json: body)
            #expect(try withSession.status == .forbidden && withSession.problem().code == "api_key_required")
            #expect(try await client.ledger("/api/ledger/spend", key: readOnly, idempotencyKey: "k", json: body).status == .forbidden)
            let noKey = try await client.ledger("/api/ledger/spend", key: key, idempotencyKey: nil, json: body)
            #expect(try noKey.status == .badRequest && noKey.problem().detail.contains("Idempotency-Key"))
            for bad in [
                #"{"userId":"\#(user)","amount":0,"reason":"x"}"#, #"{"userId":"\#(user)","amount":-1,"reason":"x"}"#,
                #"{"userId":"\#(user)","amount":5,"reason":"has spaces"}"#, #"{"userId":"\#(user)","amount":"5","reason":"x"}"#,
            ] {
                #expect(
                    try await client.ledger("/api/ledger/spend", key: key, idempotencyKey: UUID().uuidString, json: bad).status == .badRequest,
                    "\(bad)")
            }
            // Over 1 MiB: 413 for a valid key, 401 without one (the body is read once, whichever path answers).
            let huge = #"{"userId":"\#(user)","amount":1,"reason":"x","metadata":{"pad":""# + String(repeating: "x", count: 1 << 20) + #""}}"#
            #expect(try await client.ledger("/api/ledger/spend", key: key, idempotencyKey: "big", json: huge).status == .contentTooLarge)
            #expect(try await client.ledger("/api/ledger/spend", key: readOnly, idempotencyKey: "big", json: huge).status == .forbidden)
            let unknownUser = try await client.ledger(
                "/api/ledger/grants", key: key, idempotencyKey: "u", json: #"{"userId":"nobody","amount":5,"bucket":"bonus"}"#)
            #expect(unknownUser.status == .notFound)
            let badBucket = try await client.ledger(
                "/api/ledger/grants", key: key, idempotencyKey: "b", json: #"{"userId":"\#(user)","amount":5,"bucket":"gold"}"#)
            #expect(badBucket.status == .badRequest)
            let expiringPurchase = try await client.ledger(
                "/api/ledger/grants", key: key, idempotencyKey: "e",
                json: #"{"userId":"\#(user)","amount":5,"bucket":"purchased","expiresAt":"2099-01-01T00:00:00Z"}"#)
            #expect(expiringPurchase.status == .badRequest)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func holdsResolveOnceAndExpire(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "l3@example.com")
            let user = try await app.userID(token: token)
            let key = try await app.apiKey(["ledger:write"])
            _ = try await client.ledger(
                "/api/ledger/grants", key: key, idempotencyKey: "g", json: #"{"userId":"\#(user)","amount":7,"bucket":"subscription"}"#)
            struct Hold: Decodable { let id: String; let status: String; let amount: Int; let capturedAmount: Int?; let expiresAt: String }
            let created = try await client.ledger(
                "/api/ledger/holds", key: key, idempotencyKey: "h1", json: #"{"userId":"\#(user)","amount":6,"reason":"generation","ttlSeconds":120}"#
            )
            #expect(created.status == .created)
            let hold = try created.json(Hold.self)
            #expect(hold.status == "pending" && hold.amount == 6)
            let during = try await client.get("/api/user/token-balance", token: token).json(BalanceBody.self)
            #expect(during.totalTokens == 4 && during.heldTokens == 6)
            let capture = try await client.ledger("/api/ledger/holds/\(hold.id)/capture", key: key, idempotencyKey: "c1", json: #"{"amount":4}"#)
            #expect(capture.status == .ok)
            #expect(try capture.json(Hold.self).capturedAmount == 4)
            // The hold took the 3 bonus tokens first, then 3 subscription tokens; capturing 4 returns 2 subscription tokens.
            #expect(
                try await client.get("/api/user/token-balance", token: token).json(BalanceBody.self)
                    == BalanceBody(
                        bonusTokens: 0, subscriptionTokens: 6, purchasedTokens: 0, heldTokens: 0, totalTokens: 6))
            // A second resolution (new key) answers 409 with the final state; replaying the capture key replays it.
            let again = try await client.ledger("/api/ledger/holds/\(hold.id)/void", key: key, idempotencyKey: "v1", json: nil)
            #expect(again.status == .conflict)
            struct Resolved: Decodable { let code: String; let holdStatus: String; let capturedAmount: Int }
            #expect(try again.json(Resolved.self).holdStatus == "captured" && again.json(Resolved.self).capturedAmount == 4)
            #expect(
                try await client.ledger("/api/ledger/holds/\(hold.id)/capture", key: key, idempotencyKey: "c1", json: #"{"amount":4}"#).text
                    == capture.text)
            // An empty capture body captures everything; an expired hold cannot be captured late.
            let second = try await client.ledger(
                "/api/ledger/holds", key: key, idempotencyKey: "h2", json: #"{"userId":"\#(user)","amount":5,"reason":"generation","ttlSeconds":60}"#
            ).json(Hold.self)
            app.clock.advance(seconds: 61)
            let late = try await client.ledger("/api/ledger/holds/\(second.id)/capture", key: key, idempotencyKey: "c2", json: nil)
            #expect(late.status == .conflict)
            #expect(try late.json(Resolved.self).holdStatus == "expired")
            #expect(try await client.get("/api/user/token-balance", token: token).json(BalanceBody.self).totalTokens == 6)
            #expect(try await client.ledger("/api/ledger/holds/nope/void", key: key, idempotencyKey: "v2", json: nil).status == .notFound)
            let tooLong = try await client.ledger(
                "/api/ledger/holds", key: key, idempotencyKey: "h3", json: #"{"userId":"\#(user)","amount":1,"reason":"x","ttlSeconds":86401}"#)
            #expect(tooLong.status == .badRequest)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func historyIsPaginatedNewestFirst(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "l4@example.com")
            let user = try await app.userID(token: token)
            let key = try await app.apiKey(["ledger:write"])
            for i in 1...5 {
                _ = try await client.ledger(
                    "/api/ledger/grants", key: key, idempotencyKey: "g\(i)",
                    json: #"{"userId":"\#(user)","amount":\#(i),"bucket":"purchased","metadata":{"n":\#(i)}}"#)
            }
            struct Page: Decodable {
                struct Entry: Decodable { let amount: Int; let reason: String; let balanceAfter: Int?; let bucket: String? }
                let entries: [Entry]
                let nextCursor: String?
            }
            let first = try await client.get("/api/user/token-history?limit=4", token: token).json(Page.self)
            #expect(first.entries.map(\.amount) == [5, 4, 3, 2])
            #expect(first.entries.map(\.balanceAfter) == [18, 13, 9, 6])
            let cursor = try #require(first.nextCursor)
            let second = try await client.get("/api/user/token-history?limit=4&cursor=\(cursor)", token: token).json(Page.self)
            #expect(second.entries.map(\.amount) == [1, 3])
            #expect(second.entries.last?.reason == "welcome" && second.entries.last?.bucket == "bonus")
            #expect(second.nextCursor == nil)
            #expect(try await client.get("/api/user/token-history?limit=101", token: token).status == .badRequest)
            #expect(try await client.get("/api/user/token-history?cursor=abc", token: token).status == .badRequest)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func operatorsCompGrantAndVerify(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "l5@example.com")
            let user = try await app.userID(token: token)
            let admin = try await app.apiKey(["admin"])
            // A comp starts a period: the plan's monthly tokens land in the subscription bucket, once.
            #expect(try await client.comp(app, userID: user, plan: "pro_monthly", key: admin).status == .ok)
            let balance = try await client.get("/api/user/token-balance", token: token).json(SeedTokenBalance.self)
            #expect(balance.subscriptionTokens == 150 && balance.maxRollover == 150 && balance.lastSubscriptionRefresh != nil)
            let grant = try await client.ledger(
                "/api/admin/users/\(user)/grants", key: admin, idempotencyKey: "a1", json: #"{"amount":10,"bucket":"bonus","reason":"apology"}"#)
            #expect(grant.status == .created)
            #expect(
                try await client.ledger(
                    "/api/admin/users/\(user)/grants", key: admin, idempotencyKey: "a1", json: #"{"amount":10,"bucket":"bonus","reason":"apology"}"#
                ).status == .created)
            let adminBalance = try await client.get("/api/admin/users/\(user)/token-balance", token: admin).json(BalanceBody.self)
            #expect(adminBalance.bonusTokens == 13 && adminBalance.totalTokens == 163)
            #expect(try await app.rows("SELECT action FROM audit_log WHERE action = 'admin_token_grant'").count == 1)
            let history = try await client.get("/api/admin/users/\(user)/token-history", token: admin)
            #expect(history.status == .ok)
            struct Report: Decodable { let ok: Bool; let transfersChecked: Int; let differences: [String] }
            let report = try await client.get("/api/admin/ledger/verify", token: admin).json(Report.self)
            #expect(report.ok && report.differences.isEmpty && report.transfersChecked >= 3)
            #expect(try await client.get("/api/admin/ledger/verify", token: token).status == .forbidden)
        }
    }
}

extension LedgerHTTPTests {
    /// A spend's body is read before its key is checked only when the bearer looks like an API key (the key is checked in
    /// the spend's own statement), and then at most 64 KiB of it. Anyone else is answered 401 / 403 before the body is read.
    @Test(arguments: TestDatabase.engines)
    func spendBodiesAreBoundedAndStrangersAreAnsweredFirst(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "bounded@example.com")
            let user = try await app.userID(token: token)
            let key = try await app.apiKey(["ledger:write"])
            let padding = String(repeating: " ", count: 70 << 10)
            let big = #"{"userId":"\#(user)","amount":1,"reason":"r",\#(padding)"metadata":{}}"#
            let tooLarge = try await client.ledger("/api/ledger/spend", key: key, idempotencyKey: "big", json: big)
            #expect(tooLarge.status == .contentTooLarge && tooLarge.text.contains("64 KiB"), "\(tooLarge.text)")
            let spaced = #"{"userId":"\#(user)","amount":1,"reason":"r",\#(String(repeating: " ", count: 60 << 10))"metadata":{}}"#
            #expect(try await client.ledger("/api/ledger/spend", key: key, idempotencyKey: "spaced", json: spaced).status == .ok)
            for stranger in [nil, "ask_not-a-key", token, "Basic"] as [String?] {
                let answer = try await client.ledger("/api/ledger/spend", key: stranger, idempotencyKey: "big", json: big)
                #expect(answer.status == (stranger == token ? .forbidden : .unauthorized), "\(stranger ?? "none"): \(answer.status)")
            }
        }
    }
}
