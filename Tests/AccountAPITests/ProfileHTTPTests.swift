import Auth
import Clock
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import NIOCore
import Storage
import TestSupport
import Testing

@testable import AccountAPI

@Suite("Family profiles over HTTP")
struct ProfileHTTPTests {
    @Test(arguments: TestDatabase.engines)
    func planLimitsAndDowngrade(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "p1@example.com", name: "Parent")
            let userID = try await app.userID(token: token)
            let key = try await app.apiKey(["admin"])
            // Free plan: the default profile is the only one.
            let listed = try await client.get("/api/profiles/available", token: token)
            let seed = try listed.json([SeedFamilyProfile].self)
            #expect(seed.count == 1 && seed[0].isDefault && seed[0].name == "Parent" && !seed[0].hasPin)
            let denied = try await client.createProfile(token, #"{"name":"Kid","canMakePurchases":false,"canUseCustomContentTypes":false}"#)
            #expect(denied.status == .forbidden)
            #expect(try denied.problem().code == "profile_limit_reached")
            // Pro allows five, the default included.
            #expect(try await client.comp(app, userID: userID, plan: "pro_monthly", key: key).status == .ok)
            for i in 1...4 {
                let r = try await client.createProfile(
                    token, #"{"name":"Kid \#(i)","avatar":"🦊","canMakePurchases":false,"canUseCustomContentTypes":true}"#)
                #expect(r.status == .created)
                app.clock.advance(seconds: 1)
            }
            #expect(
                try await client.createProfile(token, #"{"name":"Kid 5","canMakePurchases":false,"canUseCustomContentTypes":false}"#).status
                    == .forbidden)
            // Downgrade: profiles are kept, but beyond the limit they are locked and cannot be selected.
            #expect(try await client.send(.delete, "/api/admin/users/\(userID)/subscription", token: key).status == .noContent)
            let afterDowngrade = try await client.get("/api/profiles/available", token: token).json([ProfileBody].self)
            #expect(afterDowngrade.count == 5)
            #expect(afterDowngrade.filter { !$0.isLocked }.map(\.isDefault) == [true])
            let kid = try #require(afterDowngrade.first { $0.name == "Kid 1" })
            let locked = try await client.send(.post, "/api/profiles/select", token: token, json: #"{"profileId":"\#(kid.id)"}"#)
            #expect(locked.status == .forbidden)
            #expect(try locked.problem().code == "subscription_required")
            // Basic keeps one; Max unlocks all again, oldest first.
            #expect(try await client.comp(app, userID: userID, plan: "max_monthly", key: key).status == .ok)
            let unlocked = try await client.get("/api/profiles/available", token: token).json([ProfileBody].self)
            #expect(unlocked.allSatisfy { !$0.isLocked })
            let select = try await client.send(.post, "/api/profiles/select", token: token, json: #"{"profileId":"\#(kid.id)"}"#)
            #expect(select.status == .ok)
            struct Selected: Decodable { let success: Bool; let selectedProfile: SeedFamilyProfile }
            #expect(try select.json(Selected.self).selectedProfile.id == kid.id)
            struct SessionBody: Decodable { let selectedProfile: SeedFamilyProfile? }
            #expect(try await client.get("/api/auth/session", token: token).json(SessionBody.self).selectedProfile?.id == kid.id)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func onlyTheOwnerManagesProfilesAndOtherAccountsSee404(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "p2@example.com", name: "Owner")
            let key = try await app.apiKey(["admin"])
            #expect(try await client.comp(app, userID: try await app.userID(token: token), plan: "pro_yearly", key: key).status == .ok)
            let kid = try await client.createProfile(token, #"{"name":"Kid","canMakePurchases":false,"canUseCustomContentTypes":false}"#).json(
                ProfileBody.self)
            let stranger = try await client.signUpAndVerify(app, email: "p3@example.com", name: "Stranger")
            // Another account's profile id: 404 everywhere, never 403.
            #expect(try await client.send(.post, "/api/profiles/select", token: stranger, json: #"{"profileId":"\#(kid.id)"}"#).status == .notFound)
            #expect(try await client.send(.put, "/api/family-profiles/\(kid.id)", token: stranger, json: #"{"name":"Mine"}"#).status == .notFound)
            #expect(try await client.send(.delete, "/api/family-profiles/\(kid.id)", token: stranger).status == .notFound)
            // On the kid's profile the owner cannot manage profiles.
            #expect(try await client.send(.post, "/api/profiles/select", token: token, json: #"{"profileId":"\#(kid.id)"}"#).status == .ok)
            let asKid = try await client.createProfile(token, #"{"name":"Sneaky","canMakePurchases":true,"canUseCustomContentTypes":true}"#)
            #expect(asKid.status == .forbidden)
            #expect(try asKid.problem().code == "forbidden")
            #expect(try await client.send(.delete, "/api/family-profiles/\(kid.id)", token: token).status == .forbidden)
            // Back on the default profile it works; deleting a profile another session selected never hands that session
            // the owner's profile: it must pick again (profileSelectionRequired), and profile-gated calls answer 403.
            let profiles = try await client.get("/api/profiles/available", token: token).json([ProfileBody].self)
            let defaultID = try #require(profiles.first { $0.isDefault }).id
            #expect(try await client.send(.post, "/api/profiles/select", token: token, json: #"{"profileId":"\#(defaultID)"}"#).status == .ok)
            #expect(try await client.send(.delete, "/api/family-profiles/\(defaultID)", token: token).status == .forbidden)
            let other = try await client.signIn("p2@example.com", "correct horse battery").json(SeedSignInResponse.self).session.token
            #expect(try await client.send(.post, "/api/profiles/select", token: other, json: #"{"profileId":"\#(kid.id)"}"#).status == .ok)
            #expect(try await client.send(.delete, "/api/family-profiles/\(kid.id)", token: token).status == .noContent)
            struct SelectionBody: Decodable {
                let selectedProfile: SeedFamilyProfile?
                let profileSelectionRequired: Bool
            }
            let after = try await client.get("/api/auth/session", token: other).json(SelectionBody.self)
            #expect(after.selectedProfile == nil && after.profileSelectionRequired)
            let gated = try await client.send(.post, "/api/entitlements/check", token: other, json: #"{"feature":"premium_stickers"}"#)
            #expect(try gated.status == .forbidden && gated.problem().code == "profile_selection_required")
            // Account actions and profile management say the same, so the app knows to show the picker.
            let rename = try await client.send(.patch, "/api/user/me", token: other, json: #"{"name":"Mine now"}"#)
            #expect(try rename.status == .forbidden && rename.problem().code == "profile_selection_required")
            let manage = try await client.createProfile(other, #"{"name":"Sneaky","canMakePurchases":true,"canUseCustomContentTypes":true}"#)
            #expect(try manage.status == .forbidden && manage.problem().code == "profile_selection_required")
            #expect(try await client.send(.post, "/api/profiles/select", token: other, json: #"{"profileId":"\#(defaultID)"}"#).status == .ok)
            let picked = try await client.get("/api/auth/session", token: other).json(SelectionBody.self)
            #expect(picked.selectedProfile?.id == defaultID && !picked.profileSelectionRequired)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func pinsNeedRecentProofAndLockAfterFiveWrongTries(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "p4@example.com", name: "Owner")
            let key = try await app.apiKey(["admin"])
            #expect(try await client.comp(app, userID: try await app.userID(token: token), plan: "pro_monthly", key: key).status == .ok)
            // Within 10 minutes of signing in, a PIN can be set without the password.
            let kid = try await client.createProfile(token, #"{"name":"Kid","pin":"4321","canMakePurchases":false,"canUseCustomContentTypes":false}"#)
            #expect(kid.status == .created)
            let kidProfile = try kid.json(ProfileBody.self)
            #expect(kidProfile.hasPin)
            // As a JSON string: the bare digits occur in a random id now and then.
            #expect(!kid.text.contains(#""4321""#) && !kid.text.contains("argon2"))
            // Later, changing a PIN needs currentPassword.
            app.clock.advance(seconds: 11 * 60)
            let noProof = try await client.createProfile(
                token, #"{"name":"Teen","pin":"1111","canMakePurchases":false,"canUseCustomContentTypes":false}"#)
            #expect(noProof.status == .forbidden)
            let wrongProof = try await client.createProfile(
                token, #"{"name":"Teen","pin":"1111","currentPassword":"not my password","canMakePurchases":false,"canUseCustomContentTypes":false}"#)
            #expect(wrongProof.status == .forbidden)
            #expect(try wrongProof.problem().code == "invalid_password")
            let proved = try await client.createProfile(
                token,
                #"{"name":"Teen","pin":"1111","currentPassword":"correct horse battery","canMakePurchases":false,"canUseCustomContentTypes":false}"#)
            #expect(proved.status == .created)
            // A name/flag update without a PIN change needs no proof.
            let renamed = try await client.send(.put, "/api/family-profiles/\(kidProfile.id)", token: token, json: #"{"name":"Kiddo","avatar":"🐼"}"#)
            #expect(renamed.status == .ok)
            #expect(try renamed.json(ProfileBody.self).hasPin, "the PIN is kept when not mentioned")

            func select(_ pin: String?) async throws -> TestResponse { try await client.selectProfile(token, kidProfile.id, pin: pin) }
            let missing = try await select(nil)
            #expect(missing.status == .forbidden, "a wrong PIN is not a sign-out")
            #expect(try missing.problem().code == "invalid_pin")
            // A correct PIN resets the count.
            #expect(try await select("0000").status == .forbidden)
            #expect(try await select("4321").status == .ok)
            for remaining in [4, 3, 2, 1] {
                let wrong = try await select("0000")
                struct Remaining: Decodable { let attemptsRemaining: Int }
                #expect(try wrong.json(Remaining.self).attemptsRemaining == remaining)
            }
            let fifth = try await select("0000")
            #expect(fifth.status == .tooManyRequests)
            #expect(try fifth.problem().code == "pin_locked")
            #expect(fifth.headers[.retryAfter] == "900")
            let rightButLocked = try await select("4321")
            #expect(rightButLocked.status == .tooManyRequests)
            // The count is stored in the database (it survives restarts and is shared by every node).
            #expect(
                try await app.rows("SELECT attempts FROM attempt_budgets WHERE budget_key = ?", ["pin:" + kidProfile.id]).first?.int("attempts") == 5)
            app.clock.advance(seconds: 15 * 60)
            #expect(try await select("4321").status == .ok)
            // Removing the PIN (with proof, from the owner's default profile) makes it selectable without one.
            let asKid = try await client.send(
                .put, "/api/family-profiles/\(kidProfile.id)", token: token,
                json: #"{"name":"Kiddo","removePin":true,"currentPassword":"correct horse battery"}"#)
            #expect(asKid.status == .forbidden)
            #expect(try await client.selectProfile(token, try await client.defaultProfileID(token)).status == .ok)
            let removed = try await client.send(
                .put, "/api/family-profiles/\(kidProfile.id)", token: token,
                json: #"{"name":"Kiddo","removePin":true,"currentPassword":"correct horse battery"}"#)
            #expect(try removed.json(ProfileBody.self).hasPin == false)
            #expect(try await select(nil).status == .ok)
        }
    }

    /// A session that unlocked a profile with its PIN keeps nothing once the PIN changes (a child who had learned the
    /// owner's PIN and unlocked the owner's profile on another device): it must choose again, with the new PIN.
    @Test(arguments: TestDatabase.engines)
    func aNewPINEndsUnlocksMadeWithTheOldOne(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "pin-change@example.com")
            let owner = try await client.defaultProfileID(token)
            func setPIN(_ pin: String) async throws -> TestResponse {
                try await client.send(
                    .put, "/api/family-profiles/\(owner)", token: token,
                    json: #"{"name":"Me","pin":"\#(pin)","canMakePurchases":true,"canUseCustomContentTypes":true}"#)
            }
            #expect(try await setPIN("1234").status == .ok)
            let device = try await client.signIn("pin-change@example.com", "correct horse battery").json(SeedSignInResponse.self).session.token
            #expect(try await client.selectProfile(device, owner, pin: "1234").status == .ok)
            #expect(try await client.get("/api/auth/sessions", token: device).status == .ok, "the owner's rights, unlocked")
            #expect(try await setPIN("5678").status == .ok)
            let after = try await client.get("/api/auth/sessions", token: device)
            #expect(try after.status == .forbidden && after.problem().code == "profile_selection_required")
            #expect(try await client.get("/api/auth/sessions", token: token).status == .ok, "the session that changed it keeps its choice")
            #expect(try await client.selectProfile(device, owner, pin: "1234").status != .ok)
            #expect(try await client.selectProfile(device, owner, pin: "5678").status == .ok)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func concurrentCreatesNeverExceedTheLimit(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "p5@example.com", name: "Owner")
            let key = try await app.apiKey(["admin"])
            #expect(try await client.comp(app, userID: try await app.userID(token: token), plan: "pro_monthly", key: key).status == .ok)
            let statuses = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                for i in 0..<12 {
                    group.addTask {
                        try await client.createProfile(token, #"{"name":"Racer \#(i)","canMakePurchases":false,"canUseCustomContentTypes":false}"#)
                            .status
                    }
                }
                return try await group.reduce(into: [HTTPResponse.Status]()) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == .created }.count == 4)
            #expect(statuses.filter { $0 == .forbidden }.count == 8)
            #expect(try await app.rows("SELECT id FROM family_profiles").count == 5)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func profileInputIsValidated(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "p6@example.com", name: "Owner")
            let key = try await app.apiKey(["admin"])
            #expect(try await client.comp(app, userID: try await app.userID(token: token), plan: "business_monthly", key: key).status == .ok)
            #expect(
                try await client.createProfile(token, #"{"name":"Anna","canMakePurchases":false,"canUseCustomContentTypes":false}"#).status
                    == .created)
            for (body, fragment) in [
                (#"{"name":"ANNA"}"#, "already has that name"),
                (#"{"name":""}"#, "must not be empty"),
                (#"{"name":"\#(String(repeating: "n", count: 31))"}"#, "at most 30 characters"),
                (#"{"name":"\#(String(repeating: "é", count: 61))"}"#, "at most 120 bytes"),
                (#"{"name":"Ben","avatar":"http://example.com/a.png"}"#, "https URL"),
                (#"{"name":"Ben","avatar":"ab"}"#, "emoji"),
                (#"{"name":"Ben","pin":"12a4"}"#, "4 to 6 digits"),
                (#"{"name":"Ben","pin":"1234567"}"#, "4 to 6 digits"),
                (#"{"name":"Ben","pin":"1234","removePin":true}"#, "not both"),
            ] {
                let r = try await client.createProfile(token, body)
                #expect(r.status == .badRequest, "\(body)")
                #expect(try r.problem().detail.contains(fragment), "\(body)")
            }
            #expect(try await client.createProfile(token, #"{"name":"Ben","avatar":"https://cdn.example.com/a.png"}"#).status == .created)
            #expect(try await client.createProfile(token, #"{"name":"Cy","avatar":"👩‍👧"}"#).status == .created)
            let defaultID = try await client.get("/api/profiles/available", token: token).json([ProfileBody].self).first(where: \.isDefault)!.id
            let noPurchases = try await client.send(
                .put, "/api/family-profiles/\(defaultID)", token: token, json: #"{"name":"Owner","canMakePurchases":false}"#)
            #expect(noPurchases.status == .badRequest)
        }
    }

    /// An operator's session acting as another of the account's profiles (a child on a shared device) has that
    /// profile's power: every operator route answers 403 `owner_profile_required` until the owner's profile is selected
    /// again (a reviewer minted a permanent admin key from a child's profile).
    @Test(arguments: TestDatabase.engines)
    func anOperatorsSessionOnAChildProfileHasNoOperatorPower(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let operatorUser = try await app.dependencies.auth.createAdmin(
                email: "ops-family@example.com", password: "operator password", name: "Ops", logger: TestDatabase.logger)
            let session = try await client.signIn("ops-family@example.com", "operator password").json(SeedSignInResponse.self).session.token
            #expect(try await client.comp(app, userID: operatorUser.id, plan: "pro_monthly", key: session).status == .ok)
            let kid = try await client.createProfile(session, #"{"name":"Kid"}"#).json(ProfileBody.self)
            #expect(try await client.selectProfile(session, kid.id).status == .ok)
            let minted = try await client.send(.post, "/api/admin/api-keys", token: session, json: #"{"name":"x","scopes":["admin"]}"#)
            #expect(try minted.status == .forbidden && minted.problem().code == "owner_profile_required")
            let search = try await client.get("/api/admin/users?email=ops-family@example.com", token: session)
            #expect(try search.status == .forbidden && search.problem().code == "owner_profile_required")
            #expect(try await client.selectProfile(session, try await client.defaultProfileID(session)).status == .ok)
            #expect(try await client.get("/api/admin/users?email=ops-family@example.com", token: session).status == .ok)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func operatorsManageProfilesAndEveryActionIsAudited(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "p7@example.com", name: "Owner")
            let userID = try await app.userID(token: token)
            _ = try await app.dependencies.auth.createAdmin(
                email: "ops@example.com", password: "operator password", name: "Ops", logger: TestDatabase.logger)
            let adminToken = try await client.signIn("ops@example.com", "operator password").json(SeedSignInResponse.self).session.token
            let adminKey = try await app.apiKey(["admin"])
            let ledgerKey = try await app.apiKey(["ledger:write"])
            // Who may call.
            #expect(try await client.get("/api/admin/users?email=p7@example.com", token: nil).status == .unauthorized)
            #expect(try await client.get("/api/admin/users?email=p7@example.com", token: token).status == .forbidden)
            #expect(try await client.get("/api/admin/users?email=p7@example.com", token: ledgerKey).status == .forbidden)
            #expect(try await client.get("/api/admin/users?email=p7@example.com", token: "ask_unknown").status == .unauthorized)
            struct Users: Decodable { struct U: Decodable { let id: String; let email: String? }; let users: [U] }
            let found = try await client.get("/api/admin/users?email=P7@example.com", token: adminToken).json(Users.self)
            #expect(found.users.map(\.id) == [userID])
            #expect(try await client.get("/api/admin/users/nope/profiles", token: adminKey).status == .notFound)
            // Operators create (within the plan), set a PIN without re-auth, reset it, delete.
            #expect(
                try await client.send(.post, "/api/admin/users/\(userID)/profiles", token: adminKey, json: #"{"name":"Kid"}"#).status == .forbidden)
            #expect(try await client.comp(app, userID: userID, plan: "pro_monthly", key: adminToken).status == .ok)
            let created = try await client.send(.post, "/api/admin/users/\(userID)/profiles", token: adminKey, json: #"{"name":"Kid","pin":"2468"}"#)
            #expect(created.status == .created)
            let kid = try created.json(ProfileBody.self)
            #expect(kid.hasPin)
            let updated = try await client.send(
                .put, "/api/admin/users/\(userID)/profiles/\(kid.id)", token: adminToken, json: #"{"name":"Kiddo","pin":"1357"}"#)
            #expect(try updated.json(ProfileBody.self).name == "Kiddo")
            for _ in 0..<5 {
                _ = try await client.send(.post, "/api/profiles/select", token: token, json: #"{"profileId":"\#(kid.id)","pin":"0000"}"#)
            }
            #expect(
                try await client.send(.post, "/api/profiles/select", token: token, json: #"{"profileId":"\#(kid.id)","pin":"1357"}"#).status
                    == .tooManyRequests)
            let reset = try await client.send(.post, "/api/admin/users/\(userID)/profiles/\(kid.id)/reset-pin", token: adminKey)
            #expect(try reset.json(ProfileBody.self).hasPin == false)
            #expect(try await client.send(.post, "/api/profiles/select", token: token, json: #"{"profileId":"\#(kid.id)"}"#).status == .ok)
            let listed = try await client.get("/api/admin/users/\(userID)/profiles", token: adminKey).json([ProfileBody].self)
            #expect(listed.count == 2)
            #expect(try await client.send(.delete, "/api/admin/users/\(userID)/profiles/\(kid.id)", token: adminKey).status == .noContent)
            let actions = try await app.rows(
                "SELECT action, actor FROM audit_log WHERE action LIKE 'admin_%' AND action <> 'admin_created' ORDER BY at_ms"
            ).map { try $0.string("action") }
            #expect(
                Set(actions) == [
                    "admin_subscription_comp", "admin_profile_created", "admin_profile_updated", "admin_profile_pin_reset", "admin_profile_deleted",
                ])
            let actors = try await app.rows("SELECT DISTINCT actor FROM audit_log WHERE action LIKE 'admin_%'").map { try $0.string("actor") }
            #expect(actors.contains { $0.hasPrefix("key:") } && actors.contains { $0.hasPrefix("user:") })
        }
    }

    @Test(arguments: TestDatabase.engines)
    func subscriptionShowsTheCompedPlanAndFallsBackToFree(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "p8@example.com")
            let key = try await app.apiKey(["admin"])
            struct Sub: Decodable { let planId: String; let status: String?; let isEntitled: Bool; let plan: SeedSubscriptionPlan }
            let free = try await client.get("/api/user/subscription", token: token).json(Sub.self)
            #expect(free.planId == "free" && free.status == nil && free.plan.isFreeTier)
            let userID = try await app.userID(token: token)
            let end = ISO8601DateFormatter().string(from: app.clock.now().addingTimeInterval(3 * 86400))
            let comp = try await client.send(
                .post, "/api/admin/users/\(userID)/subscription", token: key, json: #"{"planId":"max_yearly","periodEnd":"\#(end)"}"#)
            #expect(comp.status == .ok)
            #expect(
                try await client.send(.post, "/api/admin/users/\(userID)/subscription", token: key, json: #"{"planId":"free"}"#).status == .badRequest
            )
            #expect(
                try await client.send(
                    .post, "/api/admin/users/\(userID)/subscription", token: key, json: #"{"planId":"max_yearly","periodEnd":"yesterday"}"#
                ).status == .badRequest)
            let active = try await client.get("/api/user/subscription", token: token).json(Sub.self)
            #expect(active.planId == "max_yearly" && active.status == "active" && active.isEntitled && active.plan.id == "max_yearly")
            app.clock.advance(seconds: 3 * 86400 + 1)
            let lapsed = try await client.get("/api/user/subscription", token: token).json(Sub.self)
            #expect(lapsed.planId == "max_yearly" && !lapsed.isEntitled && lapsed.plan.id == "free")
        }
    }
}
