import Foundation
import HTTPTypes
import HummingbirdTesting
import Media
import MediaImages
import Storage
import TestSupport
import Testing

@testable import AccountAPI

@Suite("Maturity ratings over HTTP")
struct MaturityRatingHTTPTests {
    struct Packs: Decodable {
        struct Pack: Decodable { let id: String; let contentRating: String }
        let packs: [Pack]
    }
    struct Stickers: Decodable {
        struct Item: Decodable { let id: String; let packId: String }
        let stickers: [Item]
    }
    struct Catalog: Decodable {
        struct Category: Decodable { let identifier: String }
        let categories: [Category]
    }

    struct Snapshot: Decodable {
        struct Profile: Decodable { let maxContentRating: String? }
        let unlockedStickerPacks: [String]; let actions: [String: [String: [String]]]; let profile: Profile?
    }

    /// Packs `kids` (all), `teen` (13+) and `grown` (18+, premium), each with one sticker tagged "cat"; a Pro owner and a
    /// profile `Kid` with `maxContentRating` 9+ selected on the returned kid session.
    static func family(_ client: any TestClientProtocol, _ app: TestApp, email: String) async throws -> (owner: String, kid: String, kidID: String) {
        let admin = try await app.apiKey(["admin"])
        for (id, rating, price) in [("kids", "all", 0), ("teen", "13+", 0), ("grown", "18+", 5)] {
            let pack = #"{"id":"\#(id)","name":"\#(id)","category":"emoji","contentRating":"\#(rating)","tokenPrice":\#(price)}"#
            #expect(try await client.send(.post, "/api/admin/stickers/packs", token: admin, json: pack).status == .created)
            let image = try ImageProcessor.testPNG(width: 250 + price + id.count, height: 256)
            #expect(try await client.uploadStickers(admin, pack: id, files: [("\(id) cat.png", image)], tags: "cat").status == .created)
        }
        let owner = try await client.signUpAndVerify(app, email: email)
        #expect(try await client.comp(app, userID: try await app.userID(token: owner), plan: "pro_monthly", key: admin).status == .ok)
        let created = try await client.createProfile(
            owner, #"{"name":"Kid","canMakePurchases":false,"canUseCustomContentTypes":true,"maxContentRating":"9+"}"#)
        #expect(created.status == .created && created.text.contains(#""maxContentRating":"9+""#))
        let kidID = try created.json(ProfileBody.self).id
        let kid = try await client.signIn(email, "correct horse battery").json(SeedSignInResponse.self).session.token
        #expect(try await client.selectProfile(kid, kidID).status == .ok)
        return (owner, kid, kidID)
    }

    @Test(
        "a profile's maximum rating filters every listing and refuses pack stickers, use, unlock, check and reserve", arguments: TestDatabase.engines)
    func ratingsFilterEverything(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let (owner, kid, kidID) = try await Self.family(client, app, email: "mr1@example.com")
            func packs(_ token: String) async throws -> [String] {
                try await client.get("/api/stickers/packs", token: token).json(Packs.self).packs.map(\.id).sorted()
            }
            #expect(try await packs(owner) == ["grown", "kids", "teen"])
            #expect(try await packs(kid) == ["kids"])
            let ratings = try await client.get("/api/stickers/packs", token: owner).json(Packs.self).packs
            #expect(Dictionary(uniqueKeysWithValues: ratings.map { ($0.id, $0.contentRating) }) == ["kids": "all", "teen": "13+", "grown": "18+"])

            let teen = try await client.get("/api/stickers/pack/teen", token: kid)
            #expect(try teen.status == .forbidden && (teen.problem().code) == "content_restricted")
            #expect(try await client.get("/api/stickers/pack/teen", token: owner).status == .ok)
            func search(_ token: String) async throws -> [String] {
                try await client.get("/api/stickers/search?q=cat", token: token).json(Stickers.self).stickers.map(\.packId).sorted()
            }
            #expect(try await search(kid) == ["kids"])
            #expect(try await search(owner) == ["kids", "teen"])  // grown is locked (premium, not bought)
            let teenSticker = try #require(try await client.get("/api/stickers/pack/teen", token: owner).json(Stickers.self).stickers.first).id
            #expect(try await client.send(.post, "/api/stickers/\(teenSticker)/use", token: kid).status == .notFound)
            #expect(try await client.send(.post, "/api/stickers/\(teenSticker)/use", token: owner).status == .ok)

            // The entitlement snapshot shows the maximum and leaves out what is rated above it (grown is the owner's now).
            let keyed: HTTPFields = [.idempotencyKey: "one-key"]
            #expect(try await client.send(.post, "/api/stickers/packs/grown/unlock", token: owner, headers: keyed).status == .ok)
            // The key is the owner's profile's: the child replaying it gets its own answer, not the owner's unlock.
            let replayed = try await client.send(.post, "/api/stickers/packs/grown/unlock", token: kid, headers: keyed)
            #expect(try replayed.status == .forbidden && replayed.problem().code == "content_restricted")
            let ownerView = try await client.get("/api/entitlements", token: owner).json(Snapshot.self)
            #expect(ownerView.unlockedStickerPacks.contains("grown") && ownerView.actions["generate.custom_content"] != nil)
            let kidView = try await client.get("/api/entitlements", token: kid).json(Snapshot.self)
            #expect(!kidView.unlockedStickerPacks.contains("grown") && kidView.profile?.maxContentRating == "9+")

            // Unlock: refused before ask to buy (no purchase request, nothing held).
            #expect(
                try await client.send(
                    .post, "/api/admin/stickers/packs", token: try await app.apiKey(["admin"]),
                    json: #"{"id":"adult","name":"A","category":"emoji","contentRating":"18+","tokenPrice":3}"#
                ).status == .created)
            let unlock = try await client.send(.post, "/api/stickers/packs/adult/unlock", token: kid)
            #expect(try unlock.status == .forbidden && (unlock.problem().code) == "content_restricted")
            #expect(try await client.balance(owner).heldTokens == 0)
            #expect(try await app.rows("SELECT id FROM purchase_requests").isEmpty)

            // Check and reserve: a rated action (custom content is 9+ on the card) and a rated pack.
            struct Check: Decodable { let allowed: Bool; let reason: String? }
            let check = try await client.send(.post, "/api/entitlements/check", token: kid, json: #"{"action":"generate.custom_content"}"#)
            #expect(try check.json(Check.self).reason == nil)
            #expect(
                try await client.send(
                    .put, "/api/family-profiles/\(kidID)", token: owner,
                    json: #"{"name":"Kid","canUseCustomContentTypes":true,"maxContentRating":"all"}"#
                ).status == .ok)
            let refused = try await client.send(.post, "/api/entitlements/check", token: kid, json: #"{"action":"generate.custom_content"}"#)
            #expect(try refused.json(Check.self).reason == "content_restricted" && !refused.json(Check.self).allowed)
            #expect(try await client.get("/api/entitlements", token: kid).json(Snapshot.self).actions["generate.custom_content"] == nil)
            let service = try await app.apiKey(["entitlements:read", "ledger:write"])
            let user = try await app.userID(token: owner)
            #expect(
                try await client.reserveOutcome(service, #"{"userId":"\#(user)","profileId":"\#(kidID)","action":"generate.custom_content"}"#)
                    == "403 content_restricted")
            #expect(try await client.reserveOutcome(service, #"{"userId":"\#(user)","action":"generate.custom_content"}"#) == "201")
            #expect(
                try await client.reserveOutcome(service, #"{"userId":"\#(user)","profileId":"\#(kidID)","tokens":1,"packId":"teen"}"#)
                    == "403 content_restricted")
            #expect(try await client.reserveOutcome(service, #"{"userId":"\#(user)","profileId":"\#(kidID)","tokens":1,"packId":"kids"}"#) == "201")
        }
    }

    @Test(
        "the catalog's version follows the profile's maximum; recent uses above it are hidden; only the owner sets it",
        arguments: TestDatabase.engines)
    func catalogRecentAndSetting(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let (owner, kid, kidID) = try await Self.family(client, app, email: "mr2@example.com")
            func catalog(_ token: String, etag: String? = nil) async throws -> TestResponse {
                var headers: HTTPFields = [.authorization: "Bearer \(token)"]
                if let etag { headers[.ifNoneMatch] = etag }
                return try await client.execute(uri: "/api/stickers/catalog", method: .get, headers: headers)
            }
            let kidCatalog = try await catalog(kid)
            #expect(try kidCatalog.json(Catalog.self).categories.map(\.identifier) == ["kids"])
            let ownerCatalog = try await catalog(owner)
            #expect(try ownerCatalog.json(Catalog.self).categories.map(\.identifier).sorted() == ["kids", "teen"])
            let kidETag = try #require(kidCatalog.headers[.eTag])
            #expect(kidETag != ownerCatalog.headers[.eTag])
            #expect(try await catalog(kid, etag: kidETag).status == .notModified)
            #expect(try await catalog(owner, etag: kidETag).status == .ok)  // the owner's catalog is another one

            // Raising the maximum moves the kid's version: the old ETag answers the larger catalog.
            let raise = #"{"name":"Kid","canUseCustomContentTypes":true,"maxContentRating":"13+"}"#
            #expect(try await client.send(.put, "/api/family-profiles/\(kidID)", token: owner, json: raise).status == .ok)
            let raised = try await catalog(kid, etag: kidETag)
            #expect(try raised.status == .ok && (raised.json(Catalog.self).categories.map(\.identifier).sorted()) == ["kids", "teen"])

            // A use recorded while the pack was open drops out of recent when the maximum is lowered again.
            let teenSticker = try #require(try await client.get("/api/stickers/pack/teen", token: kid).json(Stickers.self).stickers.first).id
            #expect(try await client.send(.post, "/api/stickers/\(teenSticker)/use", token: kid).status == .ok)
            #expect(try await client.get("/api/stickers/recent", token: kid).json(Stickers.self).stickers.map(\.id) == [teenSticker])
            let lower = #"{"name":"Kid","canUseCustomContentTypes":true,"maxContentRating":"9+"}"#
            #expect(try await client.send(.put, "/api/family-profiles/\(kidID)", token: owner, json: lower).status == .ok)
            #expect(try await client.get("/api/stickers/recent", token: kid).json(Stickers.self).stickers.isEmpty)

            // Only the owner's profile sets it, never on itself; values are the scale's; removing it opens everything.
            #expect(
                try await client.send(.put, "/api/family-profiles/\(kidID)", token: kid, json: #"{"name":"Kid","removeMaxContentRating":true}"#)
                    .status == .forbidden)
            let ownerProfile = try await client.defaultProfileID(owner)
            let onDefault = try await client.send(
                .put, "/api/family-profiles/\(ownerProfile)", token: owner, json: #"{"name":"Ada","canMakePurchases":true,"maxContentRating":"9+"}"#)
            #expect(onDefault.status == .badRequest)
            let offScale = try await client.send(
                .put, "/api/family-profiles/\(kidID)", token: owner, json: #"{"name":"Kid","maxContentRating":"12+"}"#)
            #expect(try offScale.status == .badRequest && (offScale.problem().detail).contains("13+"))
            let both = try await client.send(
                .put, "/api/family-profiles/\(kidID)", token: owner, json: #"{"name":"Kid","maxContentRating":"9+","removeMaxContentRating":true}"#)
            #expect(both.status == .badRequest)
            let removed = try await client.send(
                .put, "/api/family-profiles/\(kidID)", token: owner,
                json: #"{"name":"Kid","canUseCustomContentTypes":true,"removeMaxContentRating":true}"#)
            #expect(removed.status == .ok && !removed.text.contains("maxContentRating"))
            #expect(try await client.get("/api/stickers/packs", token: kid).json(Packs.self).packs.count == 3)
            // An operator's pack with a rating off the scale is refused, naming the scale.
            let admin = try await app.apiKey(["admin"])
            let bad = try await client.send(
                .post, "/api/admin/stickers/packs", token: admin, json: #"{"id":"x","name":"X","category":"emoji","contentRating":"PG"}"#)
            #expect(try bad.status == .badRequest && (bad.problem().detail).contains("18+"))
            // A change body's null never resets a field to its default (a rated pack to `all`); only the icon may be removed.
            for field in ["contentRating", "tokenPrice", "isPremium"] {
                let nulled = try await client.send(.put, "/api/admin/stickers/packs/teen", token: admin, json: #"{"\#(field)":null}"#)
                #expect(try nulled.status == .badRequest && nulled.problem().detail.contains(field), "\(field)")
            }
            #expect(try await client.send(.put, "/api/admin/stickers/packs/teen", token: admin, json: #"{"iconUrl":null}"#).status == .ok)
            #expect(
                try await client.get("/api/stickers/packs", token: owner).json(Packs.self).packs.first { $0.id == "teen" }?.contentRating == "13+")
        }
    }

    @Test("uploads carry no rating: a profile with a maximum sees only its own, the owner's profile every one", arguments: TestDatabase.engines)
    func uploadsAreSeenByTheirProfile(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let (owner, kid, _) = try await Self.family(client, app, email: "mr3@example.com")
            // Uploads carry no rating: a profile with a maximum sees its own only, the owner's profile sees every upload.
            struct Uploaded: Decodable { struct Item: Decodable { let id: String }; let sticker: Item }
            let ownerUpload = try await client.uploadOwn(owner, try ImageProcessor.testPNG(width: 240, height: 240), name: "grown-up.png")
            let kidUpload = try await client.uploadOwn(kid, try ImageProcessor.testPNG(width: 241, height: 240), name: "kid.png")
            let ownerSticker = try ownerUpload.json(Uploaded.self).sticker.id
            let kidSticker = try kidUpload.json(Uploaded.self).sticker.id
            func custom(_ token: String) async throws -> [String] {
                try await client.get("/api/stickers/pack/custom", token: token).json(Stickers.self).stickers.map(\.id).sorted()
            }
            #expect(try await custom(kid) == [kidSticker])
            #expect(try await custom(owner) == [kidSticker, ownerSticker].sorted())
            #expect(try await client.send(.post, "/api/stickers/\(ownerSticker)/use", token: kid).status == .notFound)
            #expect(try await client.send(.delete, "/api/stickers/\(ownerSticker)", token: kid).status == .notFound)
            #expect(try await client.send(.post, "/api/stickers/\(kidSticker)/use", token: kid).status == .ok)
            let search = try await client.get("/api/stickers/search?q=grown", token: kid).json(Stickers.self).stickers
            #expect(search.isEmpty)
            #expect(try await client.get("/api/stickers/search?q=grown", token: owner).json(Stickers.self).stickers.map(\.id) == [ownerSticker])
            struct Items: Decodable {
                struct Category: Decodable { struct Item: Decodable { let identifier: String }; let identifier: String; let stickers: [Item] }
                let categories: [Category]
            }
            let kidItems = try await client.get("/api/stickers/catalog", token: kid).json(Items.self).categories.flatMap {
                $0.stickers.map(\.identifier)
            }
            #expect(kidItems.contains(kidSticker) && !kidItems.contains(ownerSticker))

        }
    }
}
