import Clock
import Foundation
import HTTPTypes
import HummingbirdTesting
import Ledger
import Storage
import TestSupport
import Testing

@testable import AccountAPI

struct UsageBody: Decodable, Equatable {
    struct Period: Decodable, Equatable { let start: String; let end: String }
    let profileId: String
    let period: Period
    let allowance: Int?
    let used: Int
    let held: Int
    let remaining: Int?
}

extension TestClientProtocol {
    func usage(_ token: String, _ profileID: String) async throws -> UsageBody {
        try await get("/api/family-profiles/\(profileID)/usage", token: token).json(UsageBody.self)
    }
}

/// A subscribed account with a child profile capped at `allowance` tokens a month, and a service key.
struct FamilyFixture {
    let token: String
    let user: String
    let owner: String
    let kid: String
    let service: String
    let admin: String

    static func make(_ client: any TestClientProtocol, _ app: TestApp, email: String, allowance: Int) async throws -> FamilyFixture {
        let token = try await client.signUpAndVerify(app, email: email)
        let user = try await app.userID(token: token)
        let admin = try await app.apiKey(["admin"])
        #expect(try await client.comp(app, userID: user, plan: "pro_monthly", key: admin).status == .ok)
        let kid = try await client.createProfile(
            token, #"{"name":"Kid","canMakePurchases":true,"canUseCustomContentTypes":false,"monthlyTokenAllowance":\#(allowance)}"#)
        #expect(kid.status == .created)
        return FamilyFixture(
            token: token, user: user, owner: try await client.defaultProfileID(token), kid: try kid.json(ProfileBody.self).id,
            service: try await app.apiKey(["entitlements:read", "ledger:write"]), admin: admin)
    }

    func reserve(_ client: any TestClientProtocol, tokens: Int, ttl: Int = 600) async throws -> TestResponse {
        try await client.reserve(service, #"{"userId":"\#(user)","profileId":"\#(kid)","tokens":\#(tokens),"ttlSeconds":\#(ttl)}"#)
    }
}

@Suite("Profile allowances over HTTP")
struct AllowanceHTTPTests {
    @Test("an allowance caps a profile's holds and unlocks; capture counts, void and expiry give back", arguments: TestDatabase.engines)
    func allowanceCountsHoldsAndUnlocks(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let f = try await FamilyFixture.make(client, app, email: "a1@example.com", allowance: 5)
            #expect(try await client.usage(f.token, f.kid).allowance == 5)
            let first = try await f.reserve(client, tokens: 2)
            #expect(first.status == .created)
            let over = try await f.reserve(client, tokens: 4)
            #expect(try over.status == .forbidden && over.problem().code == "allowance_exceeded")
            #expect(try over.json([String: JSONValue].self)["remainingTokens"] == .integer(3))
            let second = try await f.reserve(client, tokens: 3)
            #expect(second.status == .created)
            var usage = try await client.usage(f.token, f.kid)
            #expect((usage.used, usage.held, usage.remaining) == (0, 5, 0))
            // The owner's own reserves are counted on the owner's profile, which has no cap.
            let owners = try await client.reserve(f.service, #"{"userId":"\#(f.user)","profileId":"\#(f.owner)","tokens":20}"#)
            #expect(owners.status == .created)
            #expect(
                try await client.usage(f.token, f.owner)
                    == UsageBody(
                        profileId: f.owner, period: usage.period, allowance: nil, used: 0, held: 20, remaining: nil))

            let firstHold = try first.json(ReservationBody.self).holdId
            let secondHold = try second.json(ReservationBody.self).holdId
            let capture = try await client.ledger(
                "/api/ledger/holds/\(firstHold)/capture", key: f.service, idempotencyKey: "c1", json: #"{"amount":1}"#)
            #expect(capture.status == .ok)
            #expect(try await client.ledger("/api/ledger/holds/\(secondHold)/void", key: f.service, idempotencyKey: "v1", json: nil).status == .ok)
            usage = try await client.usage(f.token, f.kid)
            #expect((usage.used, usage.held, usage.remaining) == (1, 0, 4))
            // An expired hold gives its tokens back to the allowance.
            #expect(try await f.reserve(client, tokens: 4, ttl: 1).status == .created)
            #expect(try await client.usage(f.token, f.kid).remaining == 0)
            app.clock.advance(seconds: 2)
            usage = try await client.usage(f.token, f.kid)
            #expect((usage.used, usage.held, usage.remaining) == (1, 0, 4))

            // Unlocks from the child's session count on its allowance.
            #expect(try await client.createPack(f.admin, id: "big", premium: true, price: 5).status == .created)
            #expect(try await client.createPack(f.admin, id: "small", premium: true, price: 3).status == .created)
            #expect(try await client.selectProfile(f.token, f.kid).status == .ok)
            let refused = try await client.send(.post, "/api/stickers/packs/big/unlock", token: f.token)
            #expect(try refused.status == .forbidden && refused.problem().code == "allowance_exceeded")
            #expect(try await client.send(.post, "/api/stickers/packs/small/unlock", token: f.token).status == .ok)
            #expect(try await client.usage(f.token, f.kid).used == 4)
            struct History: Decodable {
                struct Entry: Decodable { struct Meta: Decodable { let profileId: String? }; let reason: String; let metadata: Meta? }
                let entries: [Entry]
            }
            #expect(try await client.selectProfile(f.token, f.owner).status == .ok)  // history is the owner's
            let history = try await client.get("/api/user/token-history", token: f.token).json(History.self)
            #expect(history.entries.first { $0.reason == "pack_unlock" }?.metadata?.profileId == f.kid)
            #expect(try await app.dependencies.ledger.verify(logger: TestDatabase.logger).ok)
        }
    }

    @Test("the owner sets allowances and reads every profile's usage; a profile reads only its own", arguments: TestDatabase.engines)
    func ownersSetAllowancesAndReadUsage(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let f = try await FamilyFixture.make(client, app, email: "a2@example.com", allowance: 5)
            let sibling = try await client.createProfile(f.token, #"{"name":"Sib","canMakePurchases":false}"#).json(ProfileBody.self).id
            func put(_ id: String, _ json: String) async throws -> TestResponse {
                try await client.send(.put, "/api/family-profiles/\(id)", token: f.token, json: json)
            }
            let raised = try await put(f.kid, #"{"name":"Kid","canMakePurchases":true,"monthlyTokenAllowance":10}"#)
            #expect(try raised.json([String: JSONValue].self)["monthlyTokenAllowance"] == .integer(10))
            // Without the field an update keeps the allowance; removeMonthlyTokenAllowance clears it.
            #expect(try await put(f.kid, #"{"name":"Kiddo","canMakePurchases":true}"#).status == .ok)
            #expect(try await client.usage(f.token, f.kid).allowance == 10)
            #expect(try await put(f.kid, #"{"name":"Kiddo","canMakePurchases":true,"monthlyTokenAllowance":-1}"#).status == .badRequest)
            #expect(try await put(f.owner, #"{"name":"Ada","canMakePurchases":true,"monthlyTokenAllowance":5}"#).status == .badRequest)
            #expect(try await put(f.kid, #"{"name":"Kiddo","canMakePurchases":true,"removeMonthlyTokenAllowance":true}"#).status == .ok)
            let uncapped = try await client.usage(f.token, f.kid)
            #expect(uncapped.allowance == nil && uncapped.remaining == nil)
            #expect(try await client.get("/api/family-profiles/\(f.kid)/usage", token: f.token).text.contains(#""allowance":null"#))

            #expect(try await client.get("/api/family-profiles/nope/usage", token: f.token).status == .notFound)
            #expect(try await client.get("/api/family-profiles/\(f.kid)/usage", token: nil).status == .unauthorized)
            let stranger = try await client.signUpAndVerify(app, email: "a3@example.com")
            #expect(try await client.get("/api/family-profiles/\(f.kid)/usage", token: stranger).status == .notFound)
            #expect(try await client.selectProfile(f.token, f.kid).status == .ok)
            #expect(try await client.get("/api/family-profiles/\(f.kid)/usage", token: f.token).status == .ok)
            #expect(try await client.get("/api/family-profiles/\(sibling)/usage", token: f.token).status == .forbidden)
            #expect(try await client.get("/api/family-profiles/\(f.owner)/usage", token: f.token).status == .forbidden)
        }
    }

    @Test("30 parallel reserves from one profile never pass its allowance of 5; a new period starts at zero", arguments: TestDatabase.engines)
    func parallelReservesStayWithinTheAllowance(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let f = try await FamilyFixture.make(client, app, email: "a4@example.com", allowance: 5)
            let codes = try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<30 {
                    group.addTask {
                        let r = try await f.reserve(client, tokens: 1)
                        return r.status == .created ? "201" : "\(r.status.code) \(try r.problem().code)"
                    }
                }
                return try await group.reduce(into: [String: Int]()) { $0[$1, default: 0] += 1 }
            }
            #expect(codes == ["201": 5, "403 allowance_exceeded": 25])
            let month0 = try await client.usage(f.token, f.kid)
            #expect((month0.held, month0.remaining) == (5, 0))
            // The comp started a monthly period; 32 days later a new one starts (a renewal), and with it a new allowance.
            app.clock.advance(seconds: 32 * 86_400)
            #expect(try await client.comp(app, userID: f.user, plan: "pro_monthly", key: f.admin).status == .ok)
            let token = try await client.signIn("a4@example.com", "correct horse battery").json(SeedSignInResponse.self).session.token
            let later = try await client.usage(token, f.kid)
            #expect(later.period != month0.period && later.used == 0 && later.held == 0 && later.remaining == 5)
            #expect(try await f.reserve(client, tokens: 5).status == .created)
            #expect(try await app.dependencies.ledger.verify(logger: TestDatabase.logger).ok)
        }
    }

    @Test("a yearly plan's allowance period is the month of its period, as its tokens drip", arguments: TestDatabase.engines)
    func yearlyPlansCountByTheMonth(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let f = try await FamilyFixture.make(client, app, email: "a5@example.com", allowance: 5)
            let start = app.clock.now()
            let yearLater = ISO8601DateFormatter().string(from: start.addingTimeInterval(365 * 86_400))
            let comp = try await client.send(
                .post, "/api/admin/users/\(f.user)/subscription", token: f.admin, json: #"{"planId":"business_yearly","periodEnd":"\#(yearLater)"}"#)
            #expect(comp.status == .ok)
            #expect(try await f.reserve(client, tokens: 5).status == .created)
            let month0 = try await client.usage(f.token, f.kid)
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            let (from, to) = (try #require(formatter.date(from: month0.period.start)), try #require(formatter.date(from: month0.period.end)))
            #expect(abs(from.timeIntervalSince(start)) < 1 && (28...31).contains(Int(to.timeIntervalSince(from) / 86_400)))
            app.clock.advance(seconds: 40 * 86_400)
            let token = try await client.signIn("a5@example.com", "correct horse battery").json(SeedSignInResponse.self).session.token
            let month1 = try await client.usage(token, f.kid)
            #expect(month1.period.start == month0.period.end && month1.remaining == 5 && month1.held == 0)
        }
    }

    @Test("parallel retries of one key on a capped profile all replay the one hold; the child's check sees the cap", arguments: TestDatabase.engines)
    func retriesReplayAndChecksSeeTheCap(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let f = try await FamilyFixture.make(client, app, email: "a6@example.com", allowance: 1)
            let answers = try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<20 {
                    group.addTask {
                        let r = try await client.reserve(
                            f.service, #"{"userId":"\#(f.user)","profileId":"\#(f.kid)","tokens":1}"#, idempotencyKey: "same")
                        return "\(r.status.code) \(r.text)"
                    }
                }
                return try await group.reduce(into: Set<String>()) { $0.insert($1) }
            }
            #expect(answers.count == 1 && answers.first?.hasPrefix("201 ") == true, "\(answers)")
            #expect(try await client.usage(f.token, f.kid).held == 1)
            #expect(try await client.selectProfile(f.token, f.kid).status == .ok)
            let check = try await client.send(.post, "/api/entitlements/check", token: f.token, json: #"{"action":"generate.coloring_pages"}"#)
            #expect(check.text.contains(#""reason":"allowance_exceeded""#))
        }
    }
}
