import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Storage
import TestSupport
import Testing

@testable import AccountAPI

/// What a newcomer and an app trip over in the first hour: statuses an app can act on, errors that name the field and
/// the allowed values, operator inputs with defaults, and a downgrade that reaches sessions already on a locked profile.
@Suite("The first hour over HTTP")
struct FirstHourHTTPTests {
    struct SessionBody: Decodable {
        struct Profile: Decodable { let id: String }
        let selectedProfile: Profile?
        let profileSelectionRequired: Bool
    }

    struct SnapshotBody: Decodable {
        struct Profile: Decodable { let id: String }
        let planId: String
        let profile: Profile?
        let profileSelectionRequired: Bool
    }

    @Test(arguments: TestDatabase.engines)
    func aDowngradeReachesASessionOnTheNowLockedProfile(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "fh1@example.com")
            let user = try await app.userID(token: token)
            let admin = try await app.apiKey(["admin"])
            #expect(try await client.comp(app, userID: user, plan: "pro_monthly", key: admin).status == .ok)
            let kid = try await client.createProfile(token, #"{"name":"Kid","canMakePurchases":false,"canUseCustomContentTypes":false}"#)
                .json(ProfileBody.self)
            #expect(try await client.selectProfile(token, kid.id).status == .ok)
            let before = try await client.get("/api/auth/session", token: token).json(SessionBody.self)
            #expect(before.selectedProfile?.id == kid.id && !before.profileSelectionRequired)

            // Downgraded to free (one profile): the kid's profile is locked; the session must pick again, and it is
            // never silently handed the owner's profile.
            #expect(try await client.send(.delete, "/api/admin/users/\(user)/subscription", token: admin).status == .noContent)
            let after = try await client.get("/api/auth/session", token: token).json(SessionBody.self)
            #expect(after.selectedProfile == nil && after.profileSelectionRequired)
            let snapshot = try await client.get("/api/entitlements", token: token).json(SnapshotBody.self)
            #expect(snapshot.planId == "free" && snapshot.profile == nil && snapshot.profileSelectionRequired)
            let check = try await client.send(.post, "/api/entitlements/check", token: token, json: #"{"feature":"hasImageUpload"}"#)
            #expect(try check.status == .forbidden && check.problem().code == "profile_selection_required")
            let unlock = try await client.send(.post, "/api/stickers/packs/any/unlock", token: token)
            #expect(try unlock.status == .forbidden && unlock.problem().code == "profile_selection_required")
            #expect(try await client.selectProfile(token, kid.id).status == .forbidden)

            // Picking the owner's profile clears it; upgrading again makes the kid's profile usable again.
            #expect(try await client.selectProfile(token, try await client.defaultProfileID(token)).status == .ok)
            let owner = try await client.get("/api/entitlements", token: token).json(SnapshotBody.self)
            #expect(owner.profile != nil && !owner.profileSelectionRequired)
            #expect(try await client.comp(app, userID: user, plan: "pro_monthly", key: admin).status == .ok)
            #expect(try await client.selectProfile(token, kid.id).status == .ok)
            #expect(try await client.get("/api/entitlements", token: token).json(SnapshotBody.self).profile?.id == kid.id)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func credentialsOfTheWrongKindAre403NotSignedOut(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "fh2@example.com")
            let key = try await app.apiKey(["ledger:write", "entitlements:read"])
            for path in ["/api/auth/session", "/api/entitlements", "/api/user/token-balance", "/api/profiles/available"] {
                let response = try await client.get(path, token: key)
                #expect(try response.status == .forbidden && response.problem().code == "session_required", "\(path)")
            }
            let user = try await app.userID(token: token)
            let asUser = try await client.get("/api/users/\(user)/entitlements", token: token)
            #expect(try asUser.status == .forbidden && asUser.problem().code == "api_key_required")
            // Dead credentials of either kind stay 401, worded for who calls.
            let noKey = try await client.get("/api/users/\(user)/entitlements", token: nil)
            #expect(try noKey.status == .unauthorized && noKey.problem().detail.contains("API key"))
            #expect(try await client.get("/api/entitlements", token: "ask_not-a-key").status == .unauthorized)
            #expect(try await client.get("/api/users/\(user)/entitlements", token: "not-a-session").status == .unauthorized)
            // HEAD answers wherever GET does, without a body.
            let head = try await client.execute(uri: "/api/entitlements", method: .head, headers: [.authorization: "Bearer \(token)"])
            #expect(head.status == .ok && head.body.readableBytes == 0 && head.headers[.eTag] != nil, "\(head.status) \(head.headers)")
            #expect(try await client.execute(uri: "/health", method: .head, headers: [:]).status == .ok)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func packEditsChangeOnlyWhatTheyName(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let admin = try await app.apiKey(["admin"])
            for body in [
                #"{"id":"starter","name":"Starter","category":"emoji"}"#, #"{"id":"priced","name":"Priced","category":"emoji","tokenPrice":3}"#,
            ] {
                #expect(try await client.send(.post, "/api/admin/stickers/packs", token: admin, json: body).status == .created)
            }
            // PUT changes what the body names: a rename keeps the price; a price change makes the pack premium.
            struct Priced: Decodable { let name: String; let tokenPrice: Int; let isPremium: Bool; let description: String }
            let described = try await client.send(
                .put, "/api/admin/stickers/packs/priced", token: admin, json: #"{"description":"Three tokens","tokenPrice":3}"#)
            #expect(try described.json(Priced.self).description == "Three tokens")
            let renamed = try await client.send(.put, "/api/admin/stickers/packs/priced", token: admin, json: #"{"name":"Renamed"}"#)
            let after = try renamed.json(Priced.self)
            #expect(after.name == "Renamed" && after.tokenPrice == 3 && after.isPremium && after.description == "Three tokens")
            let repriced = try await client.send(.put, "/api/admin/stickers/packs/starter", token: admin, json: #"{"tokenPrice":4}"#)
            #expect(try repriced.json(Priced.self).isPremium)
            let otherID = try await client.send(.put, "/api/admin/stickers/packs/starter", token: admin, json: #"{"id":"priced"}"#)
            #expect(otherID.status == .badRequest)
            #expect(try await client.send(.put, "/api/admin/stickers/packs/nope", token: admin, json: #"{"name":"X"}"#).status == .notFound)
            let pricedButFree = try await client.send(
                .post, "/api/admin/stickers/packs", token: admin,
                json: #"{"id":"odd","name":"Odd","category":"emoji","tokenPrice":5,"isPremium":false}"#)
            #expect(try pricedButFree.status == .badRequest && pricedButFree.problem().detail.contains("premium"))
        }
    }

    @Test(arguments: TestDatabase.engines)
    func operatorInputsHaveDefaultsAndErrorsNameTheField(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let admin = try await app.apiKey(["admin"])
            let minimal = try await client.send(
                .post, "/api/admin/stickers/packs", token: admin, json: #"{"id":"starter","name":"Starter","category":"emoji"}"#)
            #expect(minimal.status == .created)
            struct Pack: Decodable {
                let description: String; let isPremium: Bool; let tokenPrice: Int; let includedInPlans: [String]; let isActive: Bool
                let sortOrder: Int; let previewStickers: [String]
            }
            let pack = try minimal.json(Pack.self)
            #expect(pack.description == "" && !pack.isPremium && pack.tokenPrice == 0 && pack.includedInPlans.isEmpty)
            #expect(pack.isActive && pack.sortOrder == 0 && pack.previewStickers.isEmpty)
            let priced = try await client.send(
                .post, "/api/admin/stickers/packs", token: admin, json: #"{"id":"priced","name":"Priced","category":"emoji","tokenPrice":3}"#)
            #expect(try priced.json(Pack.self).isPremium)

            let again = try await client.send(
                .post, "/api/admin/stickers/packs", token: admin, json: #"{"id":"starter","name":"Starter","category":"emoji"}"#)
            #expect(try again.status == .conflict && again.problem().code == "pack_exists" && again.problem().detail.contains("PUT"))
            let badPreview = try await client.send(
                .post, "/api/admin/stickers/packs", token: admin,
                json: #"{"id":"p2","name":"P","category":"emoji","previewStickers":["https://cdn.example.com/a.png","ftp://x"]}"#)
            #expect(try badPreview.status == .badRequest && badPreview.problem().detail.contains("previewStickers[1]"))

            // Details quote input, but never much of it.
            let longPlan = String(repeating: "h", count: 20_000)
            let echoed = try await client.send(
                .post, "/api/admin/stickers/packs", token: admin,
                json: #"{"id":"p9","name":"P","category":"emoji","includedInPlans":["\#(longPlan)"]}"#)
            #expect(try echoed.status == .badRequest && echoed.problem().detail.count <= Problem.maxDetailCharacters + 1)

            for number in ["1.5", "99999999999999999999999", "-1e30"] {
                let fractional = try await client.send(
                    .post, "/api/admin/stickers/packs", token: admin, json: #"{"id":"p4","name":"P","category":"emoji","tokenPrice":\#(number)}"#)
                let detail = try fractional.problem().detail
                #expect(detail.hasPrefix("Field 'tokenPrice' must be a whole number in range (got "), "\(detail)")
            }
            let notObject = try await client.send(.post, "/api/admin/stickers/packs", token: admin, json: "[1,2]")
            #expect(try notObject.problem().detail == "The request body must be a JSON object.")
            let nested = try await client.send(
                .post, "/api/admin/stickers/packs", token: admin, json: #"{"id":"p3","name":"P","category":"emoji","previewStickers":[1]}"#)
            #expect(try nested.problem().detail == "Field 'previewStickers[0]' has the wrong type (expected a string).")

            let token = try await client.signUpAndVerify(app, email: "fh3@example.com")
            let user = try await app.userID(token: token)
            let gold = try await client.ledger(
                "/api/ledger/grants", key: try await app.apiKey(["ledger:write"]), idempotencyKey: "g",
                json: #"{"userId":"\#(user)","amount":5,"bucket":"gold"}"#)
            #expect(try gold.problem().detail == "Field 'bucket' must be one of bonus, subscription, purchased (got 'gold').")
            let noKey = try await client.send(
                .post, "/api/admin/users/\(user)/grants", token: admin, json: #"{"amount":5,"bucket":"bonus","reason":"support"}"#)
            #expect(try noKey.status == .badRequest && noKey.problem().detail.contains("Idempotency-Key"))
        }
    }
}
