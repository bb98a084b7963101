import Clock
import Foundation
import HTTPTypes
import HummingbirdTesting
import Ledger
import Logging
import NIOCore
import Storage
import TestSupport
import Testing

@testable import AccountAPI

extension TestClientProtocol {
    func createPack(_ key: String, id: String, premium: Bool, price: Int, plans: [String] = []) async throws -> TestResponse {
        let plansJSON = "[" + plans.map { "\"\($0)\"" }.joined(separator: ",") + "]"
        return try await send(
            .post, "/api/admin/stickers/packs", token: key,
            json:
                #"{"id":"\#(id)","name":"Pack \#(id)","description":"d","iconUrl":"https://cdn.example.com/\#(id).png","category":"seasonal","isPremium":\#(premium),"tokenPrice":\#(price),"includedInPlans":\#(plansJSON),"isActive":true,"sortOrder":1,"stickerCount":12,"previewStickers":["https://cdn.example.com/1.png"]}"#
        )
    }
}

@Suite("Entitlements and sticker packs over HTTP")
struct EntitlementHTTPTests {
    @Test(arguments: TestDatabase.engines)
    func featureAccessAndSnapshotFollowThePlan(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "e1@example.com")
            let user = try await app.userID(token: token)
            let admin = try await app.apiKey(["admin"])
            let free = try await client.get("/api/user/feature-access", token: token).json(SeedFeatureAccess.self)
            #expect(!free.hasImageUpload && free.maxFamilyProfiles == 1 && !free.canCreateMoreProfiles && free.currentProfileCount == 1)
            let first = try await client.get("/api/entitlements", token: token)
            let etag = try #require(first.headers[.eTag])
            struct Snapshot: Decodable {
                let planId: String; let status: String; let features: [String: Bool]; let tokens: [String: Int]; let unlockedStickerPacks: [String]
                struct Profile: Decodable { let canMakePurchases: Bool }
                let profile: Profile?
            }
            let snapshot = try first.json(Snapshot.self)
            #expect(
                snapshot.planId == "free" && snapshot.status == "free" && snapshot.features["modelSelector"] == false && snapshot.tokens["total"] == 3
            )
            #expect(snapshot.profile?.canMakePurchases == true)
            let notModified = try await client.execute(
                uri: "/api/entitlements", method: .get, headers: [.authorization: "Bearer \(token)", .ifNoneMatch: etag])
            #expect(notModified.status == .notModified)
            // `If-None-Match` is read as everywhere (`IfNoneMatch`): `*`, and a list with the tag weak, match too.
            for header in ["*", "\"other\", W/\(etag)"] {
                let conditional = try await client.execute(
                    uri: "/api/entitlements", method: .get, headers: [.authorization: "Bearer \(token)", .ifNoneMatch: header])
                #expect(conditional.status == .notModified, "\(header)")
            }
            // A plan change shows on the very next request, with a new ETag.
            #expect(try await client.comp(app, userID: user, plan: "business_yearly", key: admin).status == .ok)
            let after = try await client.execute(
                uri: "/api/entitlements", method: .get, headers: [.authorization: "Bearer \(token)", .ifNoneMatch: etag])
            #expect(after.status == .ok && after.headers[.eTag] != etag)
            #expect(try after.json(Snapshot.self).features["modelSelector"] == true)
            let business = try await client.get("/api/user/feature-access", token: token).json(SeedFeatureAccess.self)
            #expect(business.hasModelSelector && business.hasImageUpload && business.maxFamilyProfiles == 10 && business.canCreateMoreProfiles)
            // Services read the same snapshot with entitlements:read.
            let reader = try await app.apiKey(["entitlements:read"])
            let forService = try await client.get("/api/users/\(user)/entitlements", token: reader).json(Snapshot.self)
            #expect(forService.planId == "business_yearly")
            // A service asks about the user, not a profile: the snapshot carries none (the app's own one does).
            #expect(forService.profile == nil)
            #expect(try await client.get("/api/entitlements", token: token).json(Snapshot.self).profile != nil)
            #expect(try await client.get("/api/users/\(user)/entitlements", token: admin).status == .forbidden)
            #expect(try await client.get("/api/users/nobody/entitlements", token: reader).status == .notFound)
        }
    }

    @Test(
        "the snapshot is read on every request: each change shows on the very next GET with a new ETag, an unchanged one answers the same bytes",
        arguments: TestDatabase.engines)
    func snapshotIsFreshOnEveryRequest(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "fresh@example.com")
            let user = try await app.userID(token: token)
            let admin = try await app.apiKey(["admin"])
            let ledgerKey = try await app.apiKey(["ledger:write"])
            var probe = SnapshotProbe(client: client, token: token)
            #expect(try await probe.next("sign-up").tokens["total"] == 3)
            _ = try await client.ledger(
                "/api/ledger/grants", key: ledgerKey, idempotencyKey: "g1", json: #"{"userId":"\#(user)","amount":20,"bucket":"purchased"}"#)
            #expect(try await probe.next("grant").tokens["total"] == 23)
            _ = try await client.ledger(
                "/api/ledger/holds", key: ledgerKey, idempotencyKey: "h1", json: #"{"userId":"\#(user)","amount":4,"reason":"job","ttlSeconds":60}"#)
            #expect(try await probe.next("hold").tokens["held"] == 4)
            // A new locked pack is not part of the answer: same bytes, same ETag. Unlocking it is.
            #expect(try await client.createPack(admin, id: "comet", premium: true, price: 2).status == .created)
            #expect(try await probe.next("new locked pack", changed: false).unlockedStickerPacks.isEmpty)
            #expect(try await client.send(.post, "/api/stickers/packs/comet/unlock", token: token).status == .ok)
            #expect(try await probe.next("unlock").unlockedStickerPacks == ["comet"])
            // The hold lapses by the clock alone (no write): the next answer no longer counts it.
            app.clock.advance(seconds: 61)
            #expect(try await probe.next("hold expired").tokens["held"] == 0)
            // A plan whose period ends by the clock: the next answer after the end is the free plan, with no write either.
            let end = ISO8601DateFormatter().string(from: app.clock.now().addingTimeInterval(3600))
            #expect(
                try await client.send(
                    .post, "/api/admin/users/\(user)/subscription", token: admin, json: #"{"planId":"pro_monthly","periodEnd":"\#(end)"}"#
                ).status == .ok)
            #expect(try await probe.next("comp").planId == "pro_monthly")
            app.clock.advance(seconds: 3601)
            #expect(try await probe.next("period over").planId == "free")
            // Switching profile changes the answer; renaming the selected profile does too.
            #expect(try await client.comp(app, userID: user, plan: "pro_monthly", key: admin).status == .ok)
            _ = try await probe.next("pro again")
            let kid = try await client.createProfile(token, #"{"name":"Kid","canMakePurchases":false,"canUseCustomContentTypes":false}"#).json(
                ProfileBody.self)
            #expect(try await client.send(.post, "/api/profiles/select", token: token, json: #"{"profileId":"\#(kid.id)"}"#).status == .ok)
            #expect(try await probe.next("kid selected").profile?.name == "Kid")
            #expect(
                try await client.send(.put, "/api/admin/users/\(user)/profiles/\(kid.id)", token: admin, json: #"{"name":"Kiddo"}"#).status == .ok)
            #expect(try await probe.next("kid renamed").profile?.name == "Kiddo")
            // With no profile selected, the answer carries the default profile (and back to the kid once selected again).
            let defaultName = try #require(try await app.rows("SELECT name FROM family_profiles WHERE user_id = ? AND is_default", [user]).first)
                .string("name")
            #expect(defaultName != "Kiddo")
            try await app.dependencies.database.transaction(logger: TestDatabase.logger) {
                _ = try await $0.query("UPDATE sessions SET selected_profile_id = NULL WHERE user_id = ?", [user])
            }
            // Both are answers seen before (the default profile's before the kid was selected), so their ETags are too.
            #expect(try await probe.next("selection cleared", changed: false).profile?.name == defaultName)
            #expect(try await client.send(.post, "/api/profiles/select", token: token, json: #"{"profileId":"\#(kid.id)"}"#).status == .ok)
            #expect(try await probe.next("kid selected again", changed: false).profile?.name == "Kiddo")
            // Signing out: the very next request with that token is refused.
            #expect(try await client.send(.post, "/api/auth/sign-out", token: token).status == .ok)
            #expect(try await client.get("/api/entitlements", token: token).status == .unauthorized)
            #expect(try await client.get("/api/entitlements", token: "not-a-session").status == .unauthorized)
            // A live API key where a user's session is needed: 403 session_required, not "signed out".
            let withKey = try await client.get("/api/entitlements", token: ledgerKey)
            #expect(try withKey.status == .forbidden && withKey.problem().code == "session_required")
        }
    }

    @Test(
        "the snapshot checks its session as every route does: it slides the idle expiry (at most one write a minute) and refuses an idle session or a deleted user's",
        arguments: TestDatabase.engines)
    func snapshotChecksItsSession(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "idle@example.com")
            let user = try await app.userID(token: token)
            func lastUsed() async throws -> Int64 {
                try #require(try await app.rows("SELECT last_used_at_ms FROM sessions WHERE user_id = ?", [user]).first).int("last_used_at_ms")
            }
            let start = try await lastUsed()
            app.clock.advance(seconds: 30)
            #expect(try await client.get("/api/entitlements", token: token).status == .ok)
            #expect(try await lastUsed() == start, "written again within the touch interval")
            app.clock.advance(seconds: 31)
            #expect(try await client.get("/api/entitlements", token: token).status == .ok)
            #expect(abs(try await lastUsed() - Int64(app.clock.now().timeIntervalSince1970 * 1000)) <= 1, "not touched after a minute")
            // Six days idle is within the window the last use slid; then seven days and a second more is not.
            app.clock.advance(seconds: 6 * 24 * 3600)
            #expect(try await client.get("/api/entitlements", token: token).status == .ok)
            app.clock.advance(seconds: 7 * 24 * 3600 + 1)
            #expect(try await client.get("/api/entitlements", token: token).status == .unauthorized)
            #expect(try await client.get("/api/auth/session", token: token).status == .unauthorized)
            // A deleted user's live session is refused too.
            let other = try await client.signUpAndVerify(app, email: "gone@example.com")
            #expect(try await client.get("/api/entitlements", token: other).status == .ok)
            let otherUser = try await app.userID(token: other)
            try await app.dependencies.database.transaction(logger: TestDatabase.logger) {
                _ = try await $0.query("UPDATE users SET deleted_at_ms = 1 WHERE id = ?", [otherUser])
            }
            #expect(try await client.get("/api/entitlements", token: other).status == .unauthorized)
        }
    }

    @Test(
        "a due session's parallel requests write its touch once, and so do a due API key's (a trigger counts the rows' writes)",
        arguments: TestDatabase.engines)
    func parallelRequestsTouchOnce(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "busy@example.com")
            let admin = try await app.apiKey(["admin"])
            try await app.countWrites(to: "sessions")
            try await app.countWrites(to: "api_keys")
            for round in 1...3 {
                app.clock.advance(seconds: 61)
                let statuses = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                    for index in 0..<36 {
                        group.addTask {
                            switch index % 3 {
                            case 0: try await client.get("/api/entitlements", token: token).status
                            case 1: try await client.get("/api/auth/session", token: token).status
                            default: try await client.get("/api/admin/audit?limit=1", token: admin).status
                            }
                        }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                #expect(statuses.allSatisfy { $0 == .ok })
                #expect(try await app.writes(to: "sessions") == round, "round \(round)")
                #expect(try await app.writes(to: "api_keys") == round, "round \(round)")
            }
        }
    }

    @Test(
        "concurrent snapshot requests of many sessions (sharing statements on PostgreSQL) each get their own user's answer; a signed-out one gets 401",
        arguments: TestDatabase.engines)
    func concurrentSessionsGetTheirOwnSnapshots(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let ledgerKey = try await app.apiKey(["ledger:write"])
            var sessions: [(token: String, user: String, total: Int)] = []
            for i in 0..<10 {
                let token = try await client.signUpAndVerify(app, email: "many\(i)@example.com")
                let user = try await app.userID(token: token)
                _ = try await client.ledger(
                    "/api/ledger/grants", key: ledgerKey, idempotencyKey: "g\(i)",
                    json: #"{"userId":"\#(user)","amount":\#(i + 1),"bucket":"purchased"}"#)
                sessions.append((token, user, 3 + i + 1))
            }
            let signedOut = sessions.removeLast()
            #expect(try await client.send(.post, "/api/auth/sign-out", token: signedOut.token).status == .ok)
            struct Snapshot: Decodable { let userId: String; let tokens: [String: Int] }
            let statementsBefore = try await client.metric("entitlement_snapshot_statements")
            let sessionsBefore = try await client.metric("entitlement_snapshot_sessions")
            let results = try await withThrowingTaskGroup(of: (Int, Int, Snapshot?).self) { group in
                for round in 0..<6 {
                    for (index, session) in sessions.enumerated() {
                        group.addTask {
                            let response = try await client.get("/api/entitlements", token: session.token)
                            return (index, Int(response.status.code), response.status == .ok ? try response.json(Snapshot.self) : nil)
                        }
                    }
                    group.addTask { (-1, Int(try await client.get("/api/entitlements", token: signedOut.token).status.code), nil) }
                    _ = round
                }
                return try await group.reduce(into: [(Int, Int, Snapshot?)]()) { $0.append($1) }
            }
            #expect(results.count == 6 * (sessions.count + 1))
            for (index, status, snapshot) in results {
                if index < 0 {
                    #expect(status == 401)
                } else {
                    #expect(status == 200 && snapshot?.userId == sessions[index].user && snapshot?.tokens["total"] == sessions[index].total)
                }
            }
            // PostgreSQL answers them from shared statements (the counters say how many and for how many sessions);
            // SQLite reads each on the calling thread.
            let statements = try await client.metric("entitlement_snapshot_statements") - statementsBefore
            let asked = try await client.metric("entitlement_snapshot_sessions") - sessionsBefore
            if engine == .postgres {
                #expect(statements >= 1 && statements <= asked && asked <= results.count, "\(statements) statements for \(asked) sessions")
            } else {
                #expect(statements == 0 && asked == 0)
            }
        }
    }

    @Test(arguments: TestDatabase.engines)
    func unlocksChargeOnceAndPacksLockByPlan(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "e2@example.com")
            let user = try await app.userID(token: token)
            let admin = try await app.apiKey(["admin"])
            let ledgerKey = try await app.apiKey(["ledger:write"])
            #expect(try await client.createPack(admin, id: "free-faces", premium: false, price: 0).status == .created)
            #expect(try await client.createPack(admin, id: "holiday", premium: true, price: 5).status == .created)
            #expect(try await client.createPack(admin, id: "max-only", premium: true, price: 0, plans: ["max_monthly"]).status == .created)
            #expect(try await client.createPack(admin, id: "holiday", premium: true, price: 5).status == .conflict)
            let bad = try await client.createPack(admin, id: "Bad Id", premium: true, price: 0, plans: ["nope"])
            #expect(try bad.status == .badRequest && bad.problem().detail.contains("unknown plan"))
            let packs = try await client.get("/api/stickers/packs", token: token).json(SeedStickerPacksResponse.self).packs
            #expect(Dictionary(uniqueKeysWithValues: packs.map { ($0.id, $0.isLocked) }) == ["free-faces": false, "holiday": true, "max-only": true])
            // Not enough tokens (3 welcome tokens, price 5): 402, nothing recorded.
            let poor = try await client.send(.post, "/api/stickers/packs/holiday/unlock", token: token)
            #expect(poor.status.code == 402)
            #expect(try await app.rows("SELECT pack_id FROM pack_unlocks").isEmpty)
            _ = try await client.ledger(
                "/api/ledger/grants", key: ledgerKey, idempotencyKey: "g", json: #"{"userId":"\#(user)","amount":20,"bucket":"purchased"}"#)
            // Concurrent double taps: one unlock, charged once; the others are 409.
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<6 { group.addTask { try await client.send(.post, "/api/stickers/packs/holiday/unlock", token: token).status.code } }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == 200 }.count == 1 && statuses.filter { $0 == 409 }.count == 5)
            #expect(try await client.get("/api/user/token-balance", token: token).json(BalanceBody.self).totalTokens == 18)
            // Included in Max: unlocked while on Max, locked again after; the bought pack stays.
            #expect(try await client.comp(app, userID: user, plan: "max_monthly", key: admin).status == .ok)
            var state = try await client.get("/api/stickers/packs", token: token).json(SeedStickerPacksResponse.self).packs
            #expect(state.allSatisfy { !$0.isLocked })
            #expect(try await client.send(.post, "/api/stickers/packs/max-only/unlock", token: token).status == .conflict)
            #expect(try await client.send(.delete, "/api/admin/users/\(user)/subscription", token: admin).status == .noContent)
            state = try await client.get("/api/stickers/packs", token: token).json(SeedStickerPacksResponse.self).packs
            #expect(
                Dictionary(uniqueKeysWithValues: state.map { ($0.id, $0.isLocked) }) == ["free-faces": false, "holiday": false, "max-only": true])
            // A comp that runs out (by the service's clock) locks plan-included packs again too.
            let end = ISO8601DateFormatter().string(from: app.clock.now().addingTimeInterval(3600))
            #expect(
                try await client.send(
                    .post, "/api/admin/users/\(user)/subscription", token: admin, json: #"{"planId":"max_monthly","periodEnd":"\#(end)"}"#
                ).status == .ok)
            #expect(try await client.get("/api/stickers/packs", token: token).json(SeedStickerPacksResponse.self).packs.allSatisfy { !$0.isLocked })
            app.clock.advance(seconds: 3601)
            #expect(
                try await client.get("/api/stickers/packs", token: token).json(SeedStickerPacksResponse.self).packs.first { $0.id == "max-only" }?
                    .isLocked == true)
            // Deactivated packs disappear from the list; their unlocks are kept.
            #expect(try await client.send(.delete, "/api/admin/stickers/packs/holiday", token: admin).status == .noContent)
            #expect(
                try await client.get("/api/stickers/packs", token: token).json(SeedStickerPacksResponse.self).packs.map(\.id).sorted() == [
                    "free-faces", "max-only",
                ])
            #expect(try await app.rows("SELECT pack_id FROM pack_unlocks").count == 1)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func restrictedProfilesChecksAndIdempotentUnlocks(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "e3@example.com")
            let user = try await app.userID(token: token)
            let admin = try await app.apiKey(["admin"])
            #expect(try await client.createPack(admin, id: "stars", premium: true, price: 2).status == .created)
            #expect(try await client.comp(app, userID: user, plan: "pro_monthly", key: admin).status == .ok)
            func check(_ json: String) async throws -> (Bool, String?) {
                struct R: Decodable { let allowed: Bool; let reason: String? }
                let r = try await client.send(.post, "/api/entitlements/check", token: token, json: json).json(R.self)
                return (r.allowed, r.reason)
            }
            #expect(try await check(#"{"feature":"familyProfiles"}"#) == (true, nil))
            #expect(try await check(#"{"feature":"modelSelector"}"#) == (false, "subscription_required"))
            #expect(try await check(#"{"packId":"stars"}"#) == (false, "pack_locked"))
            #expect(try await check(#"{"tokens":1000}"#) == (false, "insufficient_tokens"))
            #expect(try await check(#"{"tokens":100}"#) == (true, nil))
            #expect(try await client.send(.post, "/api/entitlements/check", token: token, json: #"{"feature":"teleport"}"#).status == .badRequest)
            #expect(try await client.send(.post, "/api/entitlements/check", token: token, json: "{}").status == .badRequest)
            // On a kid's profile that cannot purchase: checks say purchase_not_allowed / profile_restricted; an unlock asks to buy.
            let kid = try await client.createProfile(token, #"{"name":"Kid","canMakePurchases":false,"canUseCustomContentTypes":false}"#).json(
                ProfileBody.self)
            #expect(try await client.send(.post, "/api/profiles/select", token: token, json: #"{"profileId":"\#(kid.id)"}"#).status == .ok)
            #expect(try await check(#"{"packId":"stars"}"#) == (false, "purchase_not_allowed"))
            #expect(try await check(#"{"feature":"customContentTypes"}"#) == (false, "profile_restricted"))
            let asked = try await client.send(.post, "/api/stickers/packs/stars/unlock", token: token)
            #expect(asked.status == .accepted && asked.text.contains(#""status":"pending""#) && asked.text.contains(#""unlocked":false"#))
            // Back on the owner: an unlock with an Idempotency-Key replays its 200.
            let owner = try await client.get("/api/profiles/available", token: token).json([ProfileBody].self).first { $0.isDefault }!.id
            #expect(try await client.send(.post, "/api/profiles/select", token: token, json: #"{"profileId":"\#(owner)"}"#).status == .ok)
            let requestID = try #require(try asked.json(AskBody.self).purchaseRequest?.id)
            #expect(try await client.send(.post, "/api/purchase-requests/\(requestID)/decline", token: token).status == .ok)
            let first = try await client.send(.post, "/api/stickers/packs/stars/unlock", token: token, headers: [.idempotencyKey: "tap-1"])
            let replay = try await client.send(.post, "/api/stickers/packs/stars/unlock", token: token, headers: [.idempotencyKey: "tap-1"])
            #expect(first.status == .ok && replay.status == .ok && replay.text == first.text && replay.headers[.idempotentReplayed] == "true")
            #expect(
                try await client.send(.post, "/api/stickers/packs/stars/unlock", token: token, headers: [.idempotencyKey: "tap-2"]).status
                    == .conflict)
            #expect(try await check(#"{"packId":"stars"}"#) == (true, nil))
            #expect(try await client.send(.post, "/api/stickers/packs/nope/unlock", token: token).status == .notFound)
            #expect(try await client.get("/api/user/token-balance", token: token).json(BalanceBody.self).totalTokens == 151)
        }
    }
}

/// An unlock's answer that may be a purchase request.
struct AskBody: Decodable {
    struct Request: Decodable { let id: String; let status: String; let tokens: Int }
    let unlocked: Bool
    let purchaseRequest: Request?
}

/// GETs the entitlement snapshot twice per step: both answers must be byte-identical, and the ETag new unless the step
/// says the answer did not change.
struct SnapshotProbe {
    struct Snapshot: Decodable {
        let planId: String
        let tokens: [String: Int]
        let unlockedStickerPacks: [String]
        struct Profile: Decodable { let name: String }
        let profile: Profile?
    }

    let client: any TestClientProtocol
    let token: String
    var etags: [String] = []

    init(client: any TestClientProtocol, token: String) {
        self.client = client
        self.token = token
    }

    mutating func next(_ label: String, changed: Bool = true) async throws -> Snapshot {
        let first = try await client.get("/api/entitlements", token: token)
        let second = try await client.get("/api/entitlements", token: token)
        #expect(first.status == .ok && first.text == second.text && first.headers[.eTag] == second.headers[.eTag], "\(label)")
        let etag = try #require(first.headers[.eTag])
        #expect(etags.contains(etag) != changed, "\(label): ETag \(changed ? "unchanged" : "changed")")
        etags.append(etag)
        return try first.json(Snapshot.self)
    }
}

extension EntitlementHTTPTests {
    @Test(
        "30 parallel entitlement reads of a user with an expired hold all give one answer and release the hold once", arguments: TestDatabase.engines)
    func parallelReadsReleaseAnExpiredHoldOnce(engine: Engine) async throws {
        try await TestApp.run(engine, configure: { $0.sweepIntervalSeconds = 0 }) { client, app in
            let f = try await FamilyFixture.make(client, app, email: "expired-hold@example.com", allowance: 50)
            #expect(try await f.reserve(client, tokens: 3, ttl: 60).status == .created)
            app.clock.advance(seconds: 120)  // the hold expired, and the sweeper is off
            let answers = try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<30 {
                    group.addTask {
                        let r = try await client.get("/api/entitlements", token: f.token)
                        return "\(r.status.code) \(r.text)"
                    }
                }
                return try await group.reduce(into: Set<String>()) { $0.insert($1) }
            }
            #expect(answers.count == 1 && answers.first?.hasPrefix("200 ") == true, "\(answers)")
            #expect(try await app.rows("SELECT id FROM ledger_holds WHERE user_id = ? AND status = 'pending'", [f.user]).isEmpty)
            let parts = try await app.rows(
                "SELECT p.hold_id FROM ledger_hold_parts p JOIN ledger_holds h ON h.id = p.hold_id WHERE h.user_id = ?", [f.user])
            let released = try await app.rows("SELECT id FROM ledger_transfers WHERE user_id = ? AND reason = 'hold_expiry'", [f.user])
            #expect(!parts.isEmpty && released.count == parts.count, "each part returned once")
            #expect(try await app.dependencies.ledger.verify(logger: TestDatabase.logger).ok)
        }
    }
}
