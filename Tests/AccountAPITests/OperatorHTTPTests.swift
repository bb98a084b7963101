import Clock
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Storage
import TestSupport
import Testing

@testable import AccountAPI

/// The operator API: API keys over HTTP, the audit trail, debits, reversals, holds and the read-only snapshot.
@Suite("Operator API over HTTP")
struct OperatorHTTPTests {
    struct CreatedKey: Decodable { let id: String; let key: String; let scopes: [String]; let active: Bool; let expiresAt: String? }
    struct Keys: Decodable { let apiKeys: [Key]; struct Key: Decodable { let id: String; let active: Bool; let lastUsedAt: String? } }
    struct Audit: Decodable { let entries: [Entry]; let nextCursor: String?; struct Entry: Decodable { let action: String; let actor: String } }

    @Test(arguments: Engine.allCases)
    func apiKeysAreManagedOverHTTPAndStopAtOnce(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let admin = try await app.apiKey(["admin"])
            let expires = ISODate.string(app.clock.now().addingTimeInterval(3600))
            let created = try await client.send(
                .post, "/api/admin/api-keys", token: admin, json: #"{"name":"billing","scopes":["ledger:write"],"expiresAt":"\#(expires)"}"#)
            #expect(created.status == .created)
            let key = try created.json(CreatedKey.self)
            #expect(key.key.hasPrefix("ask_") && key.active && key.expiresAt != nil)
            let user = try await client.signUpAndVerify(app, email: "keys@example.com")
            let userID = try await app.userID(token: user)
            let grant = #"{"userId":"\#(userID)","amount":1,"bucket":"bonus"}"#
            #expect(try await client.ledger("/api/ledger/grants", key: key.key, idempotencyKey: "k1", json: grant).status == .created)
            let listed = try await client.get("/api/admin/api-keys", token: admin)
            #expect(!String(buffer: listed.body).contains(key.key))
            #expect(try listed.json(Keys.self).apiKeys.first { $0.id == key.id }?.lastUsedAt != nil)
            // Expired: 401 from then on.
            app.clock.advance(seconds: 3601)
            #expect(try await client.ledger("/api/ledger/grants", key: key.key, idempotencyKey: "k2", json: grant).status == .unauthorized)
            #expect(try await client.get("/api/admin/api-keys", token: admin).json(Keys.self).apiKeys.first { $0.id == key.id }?.active == false)
            // Revoked: 401 on the very next request.
            let other = try await client.send(.post, "/api/admin/api-keys", token: admin, json: #"{"name":"ops","scopes":["admin"]}"#).json(
                CreatedKey.self)
            #expect(try await client.get("/api/admin/api-keys", token: other.key).status == .ok)
            #expect(try await client.send(.delete, "/api/admin/api-keys/\(other.id)", token: admin).status == .noContent)
            #expect(try await client.get("/api/admin/api-keys", token: other.key).status == .unauthorized)
            #expect(try await client.send(.delete, "/api/admin/api-keys/\(other.id)", token: admin).status == .notFound)
            for json in [
                #"{"name":"x","scopes":["root"]}"#, #"{"name":"","scopes":["admin"]}"#,
                #"{"name":"x","scopes":["admin"],"expiresAt":"2001-01-01T00:00:00Z"}"#,
            ] {
                #expect(try await client.send(.post, "/api/admin/api-keys", token: admin, json: json).status == .badRequest)
            }
            #expect(try await client.send(.post, "/api/admin/api-keys", token: user, json: #"{"name":"x","scopes":["admin"]}"#).status == .forbidden)
            // A key makes keys that never outlive it.
            let shortLived = try await client.send(
                .post, "/api/admin/api-keys", token: admin,
                json: #"{"name":"temp","scopes":["admin"],"expiresAt":"\#(ISODate.string(app.clock.now().addingTimeInterval(60)))"}"#
            ).json(CreatedKey.self)
            let child = try await client.send(.post, "/api/admin/api-keys", token: shortLived.key, json: #"{"name":"child","scopes":["admin"]}"#)
            #expect(try child.status == .created && child.json(CreatedKey.self).expiresAt == shortLived.expiresAt)
            let service = try await client.send(
                .post, "/api/admin/api-keys", token: shortLived.key, json: #"{"name":"c2","scopes":["ledger:write"]}"#)
            #expect(try service.status == .created && service.json(CreatedKey.self).expiresAt == shortLived.expiresAt)
            let longer = try await client.send(
                .post, "/api/admin/api-keys", token: shortLived.key, json: #"{"name":"c3","scopes":["admin"],"expiresAt":"2999-01-01T00:00:00Z"}"#)
            #expect(longer.status == .badRequest)
            // The audit trail, newest first, filtered and paged.
            let page = try await client.get("/api/admin/audit?action=api_key_created&limit=1", token: admin).json(Audit.self)
            #expect(page.entries.count == 1 && page.entries[0].actor.hasPrefix("key:") && page.nextCursor != nil)
            let next = try await client.get("/api/admin/audit?action=api_key_created&limit=1&cursor=\(page.nextCursor!)", token: admin).json(
                Audit.self)
            #expect(next.entries.count == 1)
            let mine = try await client.get("/api/admin/audit?userId=\(userID)", token: admin).json(Audit.self)
            #expect(mine.entries.contains { $0.action == "email_verified" } && mine.entries.allSatisfy { $0.action != "api_key_created" })
            #expect(try await client.get("/api/admin/audit?cursor=nonsense", token: admin).status == .badRequest)
            #expect(try await client.get("/api/admin/audit?since=yesterday", token: admin).status == .badRequest)
        }
    }

    /// Issue 33: revoking a key revokes the keys it made (and theirs); a service's grant writes an audit row; an erased
    /// account's spend is never reversed (that would credit it).
    @Test(arguments: Engine.allCases)
    func revocationIsInheritedGrantsAreAuditedAndErasedAccountsAreNotCredited(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let admin = try await app.apiKey(["admin"])
            func create(_ token: String, _ name: String, _ scope: String) async throws -> CreatedKey {
                try await client.send(.post, "/api/admin/api-keys", token: token, json: #"{"name":"\#(name)","scopes":["\#(scope)"]}"#).json(
                    CreatedKey.self)
            }
            let parent = try await create(admin, "parent", "admin")
            let child = try await create(parent.key, "child", "admin")
            let grandchild = try await create(child.key, "grandchild", "ledger:write")
            let sibling = try await create(admin, "sibling", "admin")
            #expect(try await client.send(.delete, "/api/admin/api-keys/\(parent.id)", token: admin).status == .noContent)
            for key in [parent.key, child.key] { #expect(try await client.get("/api/admin/api-keys", token: key).status == .unauthorized) }
            #expect(
                try await client.ledger(
                    "/api/ledger/spend", key: grandchild.key, idempotencyKey: "s", json: #"{"userId":"x","amount":1,"reason":"r"}"#
                ).status == .unauthorized)
            #expect(try await client.get("/api/admin/api-keys", token: sibling.key).status == .ok)
            #expect(try await app.rows("SELECT subject FROM audit_log WHERE action = 'api_key_revoked'").count == 3)
            // A service grant is audited with its key as the actor.
            let ledgerKey = try await create(admin, "billing", "ledger:write")
            let token = try await client.signUpAndVerify(app, email: "erased@example.com")
            let user = try await app.userID(token: token)
            let granted = try await client.ledger(
                "/api/ledger/grants", key: ledgerKey.key, idempotencyKey: "g", json: #"{"userId":"\#(user)","amount":10,"bucket":"purchased"}"#)
            #expect(granted.status == .created)
            let audit = try await app.rows("SELECT actor FROM audit_log WHERE action = 'service_token_grant' AND subject = ?", [user])
            #expect(try audit.map { try $0.string("actor") } == ["key:\(ledgerKey.id)"])
            // Spend, erase, then try to reverse the spend: refused, nothing credited.
            #expect(
                try await client.ledger(
                    "/api/ledger/spend", key: ledgerKey.key, idempotencyKey: "s1", json: #"{"userId":"\#(user)","amount":4,"reason":"gen"}"#
                ).status == .ok)
            let spend = try #require(
                try await client.get("/api/user/token-history", token: token).json(History.self).entries.first { $0.reason == "gen" })
            #expect(try await client.send(.delete, "/api/user/me", token: token, json: #"{"password":"correct horse battery"}"#).status == .noContent)
            let reversed = try await client.send(.post, "/api/admin/ledger/transfers/\(spend.id)/reverse", token: admin, json: #"{"reason":"sorry"}"#)
            #expect(reversed.status == .notFound)
            #expect(try await app.rows("SELECT operation_id FROM ledger_reversals").isEmpty)
        }
    }

    struct Result: Decodable {
        let amount: Int; let balances: Balances; struct Balances: Decodable { let totalTokens: Int; let purchasedTokens: Int }
    }
    struct Reversal: Decodable {
        let amount: Int; let reversedReason: String; let unlock: Unlock?
        struct Unlock: Decodable { let packId: String; let kept: Bool }
    }
    struct History: Decodable { let entries: [Entry]; struct Entry: Decodable { let id: String; let reason: String } }

    @Test(arguments: Engine.allCases)
    func debitsAndReversalsCorrectBalancesOnce(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let admin = try await app.apiKey(["admin"])
            let ledgerKey = try await app.apiKey(["ledger:write"])
            let token = try await client.signUpAndVerify(app, email: "fix@example.com")  // 3 bonus
            let user = try await app.userID(token: token)
            _ = try await client.ledger(
                "/api/ledger/grants", key: ledgerKey, idempotencyKey: "g", json: #"{"userId":"\#(user)","amount":10,"bucket":"purchased"}"#)
            func debit(_ json: String, key: String) async throws -> TestResponse {
                try await client.send(.post, "/api/admin/users/\(user)/debits", token: admin, json: json, headers: [.idempotencyKey: key])
            }
            let first = try await debit(#"{"amount":4,"bucket":"purchased","reason":"duplicate purchase"}"#, key: "d1")
            #expect(try first.status == .created && first.json(Result.self).balances.purchasedTokens == 6)
            let replay = try await debit(#"{"amount":4,"bucket":"purchased","reason":"duplicate purchase"}"#, key: "d1")
            #expect(replay.status == .created && String(buffer: replay.body) == String(buffer: first.body))
            #expect(try await debit(#"{"amount":5,"bucket":"purchased","reason":"again"}"#, key: "d1").status == .conflict)
            #expect(try await debit(#"{"amount":7,"bucket":"purchased","reason":"too much"}"#, key: "d2").status.code == 402)
            #expect(try await debit(#"{"amount":1,"reason":""}"#, key: "d3").status == .badRequest)
            #expect(
                try await client.send(.post, "/api/admin/users/\(user)/debits", token: admin, json: #"{"amount":1,"reason":"x"}"#).status
                    == .badRequest)
            // Concurrent debits never take the balance below zero.
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for i in 0..<12 { group.addTask { try await debit(#"{"amount":1,"reason":"burst"}"#, key: "burst-\(i)").status.code } }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == 201 }.count == 9 && statuses.filter { $0 == 402 }.count == 3)
            // Reversal of an unlock's spend: tokens back, the unlock stays; once only.
            _ = try await client.ledger(
                "/api/ledger/grants", key: ledgerKey, idempotencyKey: "g2", json: #"{"userId":"\#(user)","amount":5,"bucket":"purchased"}"#)
            #expect(try await client.createPack(admin, id: "comet", premium: true, price: 5).status == .created)
            #expect(try await client.send(.post, "/api/stickers/packs/comet/unlock", token: token).status == .ok)
            let history = try await client.get("/api/user/token-history", token: token).json(History.self)
            let unlock = try #require(history.entries.first { $0.reason == "pack_unlock" })
            let reversed = try await client.send(
                .post, "/api/admin/ledger/transfers/\(unlock.id)/reverse", token: admin, json: #"{"reason":"sorry"}"#)
            #expect(reversed.status == .created)
            let body = try reversed.json(Reversal.self)
            #expect(body.amount == 5 && body.reversedReason == "pack_unlock" && body.unlock?.packId == "comet" && body.unlock?.kept == true)
            let again = try await client.send(.post, "/api/admin/ledger/transfers/\(unlock.id)/reverse", token: admin, json: #"{"reason":"sorry"}"#)
            #expect(try again.status == .conflict && again.problem().code == "already_reversed")
            let debitEntry = try #require(history.entries.first { $0.reason == "admin_debit" })
            let refused = try await client.send(.post, "/api/admin/ledger/transfers/\(debitEntry.id)/reverse", token: admin, json: #"{"reason":"x"}"#)
            #expect(try refused.status == .conflict && refused.problem().code == "not_reversible")
            #expect(
                try await client.send(.post, "/api/admin/ledger/transfers/nope/reverse", token: admin, json: #"{"reason":"x"}"#).status == .notFound)
            let verify = try await client.get("/api/admin/ledger/verify", token: admin)
            #expect(String(buffer: verify.body).contains(#""ok":true"#))
            #expect(try await app.rows("SELECT action FROM audit_log WHERE action IN ('admin_token_debit', 'admin_transfer_reversed')").count == 11)
        }
    }

    struct Holds: Decodable { let holds: [Hold]; struct Hold: Decodable { let id: String; let amount: Int; let expiresAt: String } }
    struct Snapshot: Decodable {
        let user: User; let entitlements: Entitlements; let profiles: [ProfileBody]; let balance: Balance; let subscription: Sub
        struct User: Decodable { let id: String }
        struct Entitlements: Decodable { let planId: String }
        struct Balance: Decodable { let totalTokens: Int }
        struct Sub: Decodable { let planId: String }
    }

    @Test(arguments: Engine.allCases)
    func holdsAndSnapshotShowWhatTheAppSees(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let admin = try await app.apiKey(["admin"])
            let ledgerKey = try await app.apiKey(["ledger:write"])
            let token = try await client.signUpAndVerify(app, email: "snap@example.com")
            let user = try await app.userID(token: token)
            _ = try await client.ledger(
                "/api/ledger/holds", key: ledgerKey, idempotencyKey: "h", json: #"{"userId":"\#(user)","amount":2,"reason":"gen","ttlSeconds":60}"#)
            let holds = try await client.get("/api/admin/users/\(user)/holds", token: admin).json(Holds.self)
            #expect(holds.holds.count == 1 && holds.holds[0].amount == 2)
            app.clock.advance(seconds: 61)
            #expect(try await client.get("/api/admin/users/\(user)/holds", token: admin).json(Holds.self).holds.isEmpty)
            let snapshot = try await client.get("/api/admin/users/\(user)/snapshot", token: admin)
            #expect(snapshot.status == .ok)
            let body = try snapshot.json(Snapshot.self)
            #expect(body.user.id == user && body.entitlements.planId == "free" && body.balance.totalTokens == 3 && body.profiles.count == 1)
            #expect(try await client.get("/api/admin/users/\(user)/snapshot", token: token).status == .forbidden)
            #expect(try await client.get("/api/admin/users/nobody/snapshot", token: admin).status == .notFound)
            #expect(try await client.get("/api/admin/users/nobody/holds", token: admin).status == .notFound)
        }
    }
}
