import Foundation
import HTTPTypes
import HummingbirdTesting
import Ledger
import Storage
import TestSupport
import Testing

@testable import AccountAPI

struct ReservationBody: Decodable {
    let holdId: String
    let tokens: Int
    let expiresAt: String
    let action: String?
    let quantity: Int?
    let attributes: [String: String]?
    let description: String?
    let balances: BalanceBody
}

extension TestClientProtocol {
    func reserve(_ key: String, _ json: String, idempotencyKey: String? = UUID().uuidString) async throws -> TestResponse {
        try await ledger("/api/entitlements/reserve", key: key, idempotencyKey: idempotencyKey, json: json)
    }

    /// "201", or the problem's status and code (e.g. "403 subscription_required").
    func reserveOutcome(_ key: String, _ json: String) async throws -> String {
        let r = try await reserve(key, json)
        return r.status.code >= 400 ? "\(r.status.code) \(try r.problem().code)" : "\(r.status.code)"
    }
}

@Suite("Priced actions and check-and-reserve over HTTP")
struct ReserveHTTPTests {
    @Test(
        "the rate card prices and gates actions by plan; reserve holds the price in one call or refuses with check's reason",
        arguments: TestDatabase.engines)
    func reserveGivesEveryReason(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "r1@example.com")
            let user = try await app.userID(token: token)
            let service = try await app.apiKey(["entitlements:read", "ledger:write"])
            let admin = try await app.apiKey(["admin"])
            func reason(_ json: String) async throws -> String { try await client.reserveOutcome(service, json) }
            // Free plan, 3 welcome tokens: two standard coloring pages cost 2.
            let first = try await client.reserve(
                service, #"{"userId":"\#(user)","action":"generate.coloring_pages","quantity":2,"ttlSeconds":60}"#, idempotencyKey: "gen-1")
            #expect(first.status == .created)
            let held = try first.json(ReservationBody.self)
            #expect(held.tokens == 2 && held.description == "Coloring page ×2" && held.attributes?["quality"] == "standard")
            #expect(held.balances.totalTokens == 1 && held.balances.heldTokens == 2)
            let replay = try await client.reserve(
                service, #"{"userId":"\#(user)","action":"generate.coloring_pages","quantity":2,"ttlSeconds":60}"#, idempotencyKey: "gen-1")
            #expect(replay.status == .created && replay.text == first.text && replay.headers[.idempotentReplayed] == "true")
            let reused = try await client.reserve(
                service, #"{"userId":"\#(user)","action":"generate.coloring_pages","quantity":1,"ttlSeconds":60}"#, idempotencyKey: "gen-1")
            #expect(reused.status == .conflict)

            #expect(
                try await reason(#"{"userId":"\#(user)","action":"generate.stickers","attributes":{"quality":"ultra"}}"#)
                    == "403 subscription_required")
            #expect(try await reason(#"{"userId":"\#(user)","action":"generate.custom_content"}"#) == "403 subscription_required")
            #expect(try await reason(#"{"userId":"\#(user)","tokens":2}"#) == "402 insufficient_tokens")
            #expect(try await client.comp(app, userID: user, plan: "pro_monthly", key: admin).status == .ok)
            #expect(
                try await reason(#"{"userId":"\#(user)","action":"generate.stickers","attributes":{"quality":"ultra"}}"#) == "403 feature_not_in_plan"
            )
            #expect(
                try await reason(#"{"userId":"\#(user)","action":"generate.stickers","attributes":{"model":"flux"}}"#) == "403 feature_not_in_plan")
            let priced = try await client.reserve(
                service, #"{"userId":"\#(user)","action":"generate.wallpapers","quantity":3,"attributes":{"quality":"high","model":"gemini"}}"#)
            #expect(priced.status == .created)
            #expect(try priced.json(ReservationBody.self).tokens == 6)
            #expect(try priced.json(ReservationBody.self).description == "Wallpaper, high, gemini ×3")
            #expect(try await reason(#"{"userId":"\#(user)","tokens":100000}"#) == "402 insufficient_tokens")
            #expect(try await client.createPack(admin, id: "gold", premium: true, price: 5).status == .created)
            #expect(try await reason(#"{"userId":"\#(user)","tokens":1,"packId":"gold"}"#) == "403 pack_locked")
            #expect(try await reason(#"{"userId":"\#(user)","tokens":1,"packId":"nope"}"#) == "404 not_found")

            // Bad input: 400 and nothing held.
            for bad in [
                #"{"userId":"\#(user)","action":"generate.teleport"}"#, #"{"userId":"\#(user)","action":"generate.stickers","quantity":5}"#,
                #"{"userId":"\#(user)","action":"generate.stickers","quantity":0}"#,
                #"{"userId":"\#(user)","action":"generate.stickers","attributes":{"colour":"red"}}"#,
                #"{"userId":"\#(user)","action":"generate.stickers","attributes":{"quality":"4k"}}"#,
                #"{"userId":"\#(user)","action":"generate.stickers","tokens":1}"#, #"{"userId":"\#(user)"}"#,
                #"{"userId":"\#(user)","tokens":1,"quantity":2}"#, #"{"userId":"\#(user)","tokens":0}"#,
                #"{"userId":"\#(user)","tokens":1,"ttlSeconds":0}"#,
            ] {
                #expect(try await reason(bad) == "400 validation_failed", "\(bad)")
            }
            #expect(try await reason(#"{"userId":"nobody","tokens":1}"#) == "404 not_found")

            // Keys: both scopes, an API key, an Idempotency-Key.
            let ledgerOnly = try await app.apiKey(["ledger:write"])
            #expect(try await client.reserve(ledgerOnly, #"{"userId":"\#(user)","tokens":1}"#).status == .forbidden)
            #expect(try await client.reserve(token, #"{"userId":"\#(user)","tokens":1}"#).status == .forbidden)
            #expect(try await client.reserve(service, #"{"userId":"\#(user)","tokens":1}"#, idempotencyKey: nil).status == .badRequest)
            #expect(try await app.dependencies.ledger.verify(logger: TestDatabase.logger).ok)
        }
    }

    @Test(
        "reserve for a profile: the action's permission, the plan's profile limit; history says what a hold was for", arguments: TestDatabase.engines)
    func reserveForProfilesAndHistory(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "r5@example.com")
            let user = try await app.userID(token: token)
            let service = try await app.apiKey(["entitlements:read", "ledger:write"])
            let admin = try await app.apiKey(["admin"])
            func reason(_ json: String) async throws -> String { try await client.reserveOutcome(service, json) }
            #expect(try await client.comp(app, userID: user, plan: "pro_monthly", key: admin).status == .ok)
            let held = try await client.reserve(service, #"{"userId":"\#(user)","action":"generate.coloring_pages","quantity":2}"#).json(
                ReservationBody.self)
            let priced = try await client.reserve(
                service, #"{"userId":"\#(user)","action":"generate.wallpapers","quantity":3,"attributes":{"quality":"high"}}"#)
            #expect(try priced.json(ReservationBody.self).tokens == 6)
            #expect(try await reason(#"{"userId":"\#(user)","tokens":1,"profileId":"nope"}"#) == "404 not_found")
            // Profiles: the action's permission, and a profile beyond the plan's limit.
            let kid = try await client.createProfile(token, #"{"name":"Kid","canMakePurchases":false,"canUseCustomContentTypes":false}"#).json(
                ProfileBody.self)
            let owner = try await client.defaultProfileID(token)
            #expect(
                try await reason(#"{"userId":"\#(user)","profileId":"\#(kid.id)","action":"generate.custom_content"}"#) == "403 profile_restricted")
            let custom = try await client.reserve(service, #"{"userId":"\#(user)","profileId":"\#(owner)","action":"generate.custom_content"}"#)
            #expect(custom.status == .created)
            #expect(try await reason(#"{"userId":"\#(user)","profileId":"\#(kid.id)","action":"generate.mandalas"}"#) == "201")
            #expect(try await client.comp(app, userID: user, plan: "basic_monthly", key: admin).status == .ok)
            #expect(try await reason(#"{"userId":"\#(user)","profileId":"\#(kid.id)","action":"generate.mandalas"}"#) == "403 profile_restricted")
            #expect(try await reason(#"{"userId":"\#(user)","profileId":"\#(owner)","action":"generate.mandalas"}"#) == "201")

            // The hold is the ledger's: capture it there; history says what it was for.
            #expect(
                try await client.ledger("/api/ledger/holds/\(held.holdId)/capture", key: service, idempotencyKey: "cap-1", json: nil).status == .ok)
            struct History: Decodable {
                struct Entry: Decodable {
                    let amount: Int; let reason: String
                    struct Meta: Decodable { let action: String?; let description: String? }
                    let metadata: Meta?
                }
                let entries: [Entry]
            }
            let history = try await client.get("/api/user/token-history?limit=100", token: token).json(History.self)
            #expect(history.entries.contains { $0.amount == -2 && $0.metadata?.description == "Coloring page ×2" })
            // A hold takes from each bucket in turn: one entry per bucket, each saying what it was for.
            #expect(history.entries.filter { $0.metadata?.action == "generate.wallpapers" }.map(\.amount).reduce(0, +) == -6)
            #expect(try await app.dependencies.ledger.verify(logger: TestDatabase.logger).ok)
        }
    }

    @Test("check prices an action and the snapshot lists what the plan allows", arguments: TestDatabase.engines)
    func checkAndSnapshotFollowTheRateCard(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            struct Pricing: Decodable {
                struct Action: Decodable { let id: String; let tokensPerUnit: Int; let maxQuantity: Int }
                let actions: [Action]
            }
            let pricing = try await client.get("/api/pricing", token: nil).json(Pricing.self)
            #expect(pricing.actions.first { $0.id == "generate.coloring_pages" }.map { ($0.tokensPerUnit, $0.maxQuantity) } ?? (0, 0) == (1, 4))

            let token = try await client.signUpAndVerify(app, email: "r2@example.com")
            let user = try await app.userID(token: token)
            let admin = try await app.apiKey(["admin"])
            struct Check: Decodable { let allowed: Bool; let reason: String?; let tokens: Int? }
            func check(_ json: String) async throws -> Check {
                try await client.send(.post, "/api/entitlements/check", token: token, json: json).json(Check.self)
            }
            struct Snapshot: Decodable { let actions: [String: [String: [String]]] }
            let free = try await client.get("/api/entitlements", token: token).json(Snapshot.self)
            #expect(free.actions["generate.coloring_pages"]?["quality"] == ["standard"] && free.actions["generate.custom_content"] == nil)
            let ultra = try await check(#"{"action":"generate.coloring_pages","attributes":{"quality":"ultra"}}"#)
            #expect(!ultra.allowed && ultra.reason == "subscription_required")
            let four = try await check(#"{"action":"generate.coloring_pages","quantity":4}"#)
            #expect(!four.allowed && four.reason == "insufficient_tokens" && four.tokens == 4)
            let one = try await check(#"{"action":"generate.coloring_pages"}"#)
            #expect(one.allowed && one.tokens == 1)
            #expect(try await client.send(.post, "/api/entitlements/check", token: token, json: #"{"action":"generate.none"}"#).status == .badRequest)
            // A detail quotes the caller's value without its control characters.
            let nul = try await client.send(.post, "/api/entitlements/check", token: token, json: #"{"action":"gen\u0000\u001bx"}"#)
            #expect(try nul.status == .badRequest && nul.problem().detail.contains("'genx'"))

            #expect(try await client.comp(app, userID: user, plan: "business_monthly", key: admin).status == .ok)
            let business = try await client.get("/api/entitlements", token: token).json(Snapshot.self)
            #expect(business.actions["generate.coloring_pages"]?["quality"] == ["standard", "high", "ultra"])
            #expect(business.actions["generate.coloring_pages"]?["model"] == ["seedream", "gemini", "flux"])
            let best = try await check(
                #"{"action":"generate.coloring_pages","quantity":4,"attributes":{"quality":"ultra","model":"flux","upload":"image"}}"#)
            #expect(best.allowed && best.tokens == 20)
        }
    }

    @Test("parallel reserves never hold more than the balance; parallel retries of one key hold once", arguments: TestDatabase.engines)
    func parallelReservesHoldTheBalanceOnce(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "r3@example.com")
            let user = try await app.userID(token: token)
            let service = try await app.apiKey(["entitlements:read", "ledger:write"])
            // 3 welcome tokens, 30 reserves of one coloring page each.
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<30 {
                    group.addTask { try await client.reserve(service, #"{"userId":"\#(user)","action":"generate.coloring_pages"}"#).status.code }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == 201 }.count == 3 && statuses.filter { $0 == 402 }.count == 27)
            let balance = try await client.balance(token)
            #expect(balance.totalTokens == 0 && balance.heldTokens == 3)

            let second = try await client.signUpAndVerify(app, email: "r4@example.com")
            let other = try await app.userID(token: second)
            let bodies = try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<10 {
                    group.addTask {
                        try await client.reserve(service, #"{"userId":"\#(other)","tokens":2}"#, idempotencyKey: "same").text
                    }
                }
                return try await group.reduce(into: Set<String>()) { $0.insert($1) }
            }
            #expect(bodies.count == 1)
            #expect(try await client.balance(second).heldTokens == 2)
            #expect(try await app.dependencies.ledger.verify(logger: TestDatabase.logger).ok)
        }
    }
}
