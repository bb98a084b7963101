import Clock
import Entitlements
import Foundation
import HTTPTypes
import HummingbirdTesting
import Media
import MediaImages
import NIOCore
import Storage
import TestSupport
import Testing

@testable import AccountAPI

@Suite("Sticker uses, search, catalog and own uploads over HTTP")
struct StickerUseHTTPTests {
    /// A free pack `fun` (two stickers, tagged) and a premium pack `gold` (one sticker); returns the admin key.
    static func catalog(_ client: any TestClientProtocol, _ app: TestApp) async throws -> String {
        let admin = try await app.apiKey(["admin"])
        for pack in [#"{"id":"fun","name":"Fun","category":"emoji"}"#, #"{"id":"gold","name":"Gold","category":"emoji","tokenPrice":2}"#] {
            #expect(try await client.send(.post, "/api/admin/stickers/packs", token: admin, json: pack).status == .created)
        }
        let fun = [
            ("Cat Wave.png", try ImageProcessor.testPNG(width: 256, height: 256)), ("Dog.png", try ImageProcessor.testPNG(width: 257, height: 256)),
        ]
        #expect(try await client.uploadStickers(admin, pack: "fun", files: fun, tags: "animal, cute").status == .created)
        #expect(
            try await client.uploadStickers(admin, pack: "gold", files: [("Gold Cat.png", try ImageProcessor.testPNG(width: 258, height: 256))])
                .status
                == .created)
        return admin
    }

    @Test(arguments: TestDatabase.engines)
    func usesFeedRecentAndPopularityAndStayWithinWhatTheUserCanUse(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            _ = try await Self.catalog(client, app)
            let token = try await client.signUpAndVerify(app, email: "su1@example.com")
            // 30 parallel uses of one sticker: each counted once.
            let uses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<30 { group.addTask { try await client.send(.post, "/api/stickers/fun:dog/use", token: token).status.code } }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(uses == Array(repeating: 200, count: 30))
            #expect(try await client.send(.post, "/api/stickers/fun:cat-wave/use", token: token).status == .ok)
            // Path parameters are percent-decoded (swift-openapi-runtime escapes ':'); bad escapes, non-UTF-8 bytes and
            // control characters name nothing (404), as an unknown UTF-8 id does.
            for path in ["fun%3Acat-wave", "fun%3acat-wave", "%66un%3Acat-wave"] {
                #expect(try await client.send(.post, "/api/stickers/\(path)/use", token: token).status == .ok, "\(path)")
            }
            for path in ["fun%3", "fun%ZZdog", "fun%00dog", "fun%FFdog", "fun%0Adog"] {
                let answer = try await client.send(.post, "/api/stickers/\(path)/use", token: token)
                #expect(answer.status == .notFound && (try? answer.problem().code) == "not_found", "\(path)")
            }
            #expect(try await client.send(.post, "/api/stickers/fun%3A%C3%A9t%C3%A9/use", token: token).status == .notFound)
            // One account counts once an hour per sticker, however often and however parallel it sends.
            #expect(try await app.rows("SELECT usage_count FROM stickers WHERE id = 'fun:dog'")[0].int("usage_count") == 1)
            let otherUser = try await client.signUpAndVerify(app, email: "su1b@example.com")
            #expect(try await client.send(.post, "/api/stickers/fun:dog/use", token: otherUser).status == .ok)
            app.clock.advance(seconds: 3601)
            #expect(try await client.send(.post, "/api/stickers/fun:dog/use", token: token).status == .ok)
            #expect(try await app.rows("SELECT usage_count FROM stickers WHERE id = 'fun:dog'")[0].int("usage_count") == 3)
            let recent = try await client.get("/api/stickers/recent", token: token).json(StickersBody.self).stickers.map(\.id)
            #expect(recent == ["fun:dog", "fun:cat-wave"])  // the later use of dog is the newest
            // A locked pack's sticker cannot be used; another user's recent list is their own.
            #expect(try await client.send(.post, "/api/stickers/gold:gold-cat/use", token: token).status == .notFound)
            let other = try await client.signUpAndVerify(app, email: "su2@example.com")
            #expect(try await client.get("/api/stickers/recent", token: other).json(StickersBody.self).stickers.isEmpty)

            // Search: names and tags, most used first, only packs this user can use.
            let animals = try await client.get("/api/stickers/search?q=animal", token: token).json(StickersBody.self).stickers.map(\.id)
            #expect(animals == ["fun:dog", "fun:cat-wave"])
            #expect(try await client.get("/api/stickers/search?q=cat", token: token).json(StickersBody.self).stickers.map(\.id) == ["fun:cat-wave"])
            #expect(try await client.get("/api/stickers/search?q=%25", token: token).json(StickersBody.self).stickers.isEmpty)
            #expect(try await client.get("/api/stickers/search?q=", token: token).status == .badRequest)
            #expect(try await client.send(.post, "/api/stickers/packs/gold/unlock", token: token).status == .ok)
            let cats = try await client.get("/api/stickers/search?q=cat&limit=1", token: token)
            struct Page: Decodable { let stickers: [StickerBody]; let nextCursor: String? }
            let first = try cats.json(Page.self)
            #expect(first.stickers.count == 1 && first.nextCursor == "1")
            let second = try await client.get("/api/stickers/search?q=cat&limit=1&cursor=1", token: token).json(Page.self)
            #expect(Set((first.stickers + second.stickers).map(\.id)) == ["fun:cat-wave", "gold:gold-cat"])
            #expect(second.stickers.allSatisfy { $0.id != "gold:gold-cat" || $0.imageUrl.contains("sig=") })
        }
    }

    @Test(arguments: TestDatabase.engines)
    func theCatalogListsUsablePacksWithAnETagAndPackListingsCountTheirStickers(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let admin = try await Self.catalog(client, app)
            let token = try await client.signUpAndVerify(app, email: "su3@example.com")
            struct Catalog: Decodable {
                struct Item: Decodable { let identifier: String; let imageUrl: String; let thumbnailUrl: String }
                struct Category: Decodable { let identifier: String; let title: String; let stickers: [Item] }
                let categories: [Category]
            }
            let first = try await client.get("/api/stickers/catalog", token: token)
            #expect(try first.json(Catalog.self).categories.map(\.identifier) == ["fun"])
            let etag = try #require(first.headers[.eTag])
            #expect(
                try await client.execute(
                    uri: "/api/stickers/catalog", method: .get, headers: [.authorization: "Bearer \(token)", .ifNoneMatch: etag]
                ).status == .notModified)
            for header in ["*", "\"other\", W/\(etag)"] {
                let conditional = try await client.execute(
                    uri: "/api/stickers/catalog", method: .get, headers: [.authorization: "Bearer \(token)", .ifNoneMatch: header])
                #expect(conditional.status == .notModified, "\(header)")
            }
            #expect(try await client.send(.post, "/api/stickers/packs/gold/unlock", token: token).status == .ok)
            let after = try await client.get("/api/stickers/catalog", token: token)
            #expect(after.headers[.eTag] != etag)
            let categories = try after.json(Catalog.self).categories
            #expect(categories.map(\.identifier) == ["fun", "gold"] && categories[1].stickers.map(\.identifier) == ["gold:gold-cat"])
            #expect(categories[1].stickers[0].imageUrl.contains("sig="))
            #expect(try await client.get(categories[1].stickers[0].imageUrl, token: nil).status == .ok)

            struct Packs: Decodable {
                struct Pack: Decodable { let id: String; let stickerCount: Int; let previewStickers: [String] }; let packs: [Pack]
            }
            let packs = try await client.get("/api/stickers/packs", token: token).json(Packs.self).packs
            let fun = try #require(packs.first { $0.id == "fun" })
            #expect(fun.stickerCount == 2 && fun.previewStickers.count == 2 && fun.previewStickers.allSatisfy { $0.hasPrefix("/media/") })

            // Operators rename, retag, reorder and delete; an icon upload gives the pack a public icon.
            let changed = try await client.send(
                .patch, "/api/admin/stickers/fun:dog", token: admin, json: #"{"name":"Puppy","tags":["dog"],"sortOrder":0}"#)
            #expect(changed.status == .ok)
            // A change to a pack's stickers moves every catalog's version: the last ETag no longer answers 304.
            let lastETag = try #require(after.headers[.eTag])
            let revalidated = try await client.execute(
                uri: "/api/stickers/catalog", method: .get, headers: [.authorization: "Bearer \(token)", .ifNoneMatch: lastETag])
            #expect(revalidated.status == .ok && revalidated.headers[.eTag] != lastETag)
            let stranger = try await client.execute(
                uri: "/api/stickers/catalog", method: .get, headers: [.authorization: "Bearer not-a-session", .ifNoneMatch: lastETag])
            #expect(stranger.status == .unauthorized)
            #expect(
                try await client.get("/api/stickers/pack/fun", token: token).json(StickersBody.self).stickers.map(\.name) == ["Puppy", "Cat Wave"])
            #expect(try await client.send(.patch, "/api/admin/stickers/nope:x", token: admin, json: #"{"name":"X"}"#).status == .notFound)
            #expect(try await client.send(.patch, "/api/admin/stickers/fun:dog", token: token, json: #"{"name":"X"}"#).status == .forbidden)
            #expect(try await client.send(.delete, "/api/admin/stickers/fun:cat-wave", token: admin).status == .noContent)
            #expect(try await client.get("/api/stickers/pack/fun", token: token).json(StickersBody.self).stickers.map(\.id) == ["fun:dog"])
        }
    }

    /// An uploaded icon is served publicly; its file is queued for removal once the pack shows another icon, whether by
    /// a new upload or a save with another `iconUrl`, and a save that keeps it queues nothing.
    @Test(arguments: TestDatabase.engines)
    func anIconsFileGoesOnceThePackShowsAnother(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let admin = try await Self.catalog(client, app)
            let icon = try await client.uploadIcon(admin, pack: "fun", try ImageProcessor.testPNG(width: 300, height: 300))
            struct PackBody: Decodable { let iconUrl: String? }
            let iconURL = try #require(try icon.json(PackBody.self).iconUrl)
            #expect(iconURL.hasPrefix("/media/"))
            #expect(try await client.get(iconURL, token: nil).status == .ok)
            func queued() async throws -> [String] {
                try await app.rows("SELECT blob_key FROM sticker_file_removals").map { try $0.string("blob_key") }
            }
            let iconKey = String(try #require(iconURL.split(separator: "/").last))
            #expect(try await !queued().contains(iconKey))
            #expect(try await client.send(.put, "/api/admin/stickers/packs/fun", token: admin, json: #"{"sortOrder":3}"#).status == .ok)
            #expect(try await !queued().contains(iconKey), "kept while the pack still shows it")
            let second = try await client.uploadIcon(admin, pack: "fun", try ImageProcessor.testPNG(width: 320, height: 300))
            let secondKey = String(try #require(try second.json(PackBody.self).iconUrl?.split(separator: "/").last))
            let afterSecond = try await queued()
            #expect(afterSecond.contains(iconKey) && !afterSecond.contains(secondKey))
            let elsewhere = try await client.send(
                .put, "/api/admin/stickers/packs/fun", token: admin, json: #"{"iconUrl":"https://cdn.example.com/fun.png"}"#)
            #expect(elsewhere.status == .ok)
            #expect(try await queued().contains(secondKey))
        }
    }

    @Test(arguments: TestDatabase.engines)
    func ownUploadsArePrivateAndParallelUploadsNeverExceedTheAllowance(engine: Engine) async throws {
        try await TestApp.run(engine, configure: { $0.stickerUploads.maxStickers = 3 }) { client, app in
            let token = try await client.signUpAndVerify(app, email: "su4@example.com")
            let images = try (0..<12).map { try ImageProcessor.testPNG(width: 200 + $0, height: 200) }
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for image in images { group.addTask { try await client.uploadOwn(token, image).status.code } }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == 201 }.count == 3 && statuses.filter { $0 == 429 }.count == 9, "\(statuses)")
            let own = try await client.get("/api/stickers/pack/custom", token: token).json(StickersBody.self).stickers
            #expect(own.count == 3 && own.allSatisfy { $0.imageUrl.contains("sig=") && $0.id.hasPrefix("custom:") })
            // Private: no file without a signature; another user cannot use or delete them.
            let key = try #require(own[0].imageUrl.split(separator: "?").first)
            #expect(try await client.get(String(key), token: nil).status == .forbidden)
            let other = try await client.signUpAndVerify(app, email: "su5@example.com")
            #expect(try await client.send(.post, "/api/stickers/\(own[0].id)/use", token: other).status == .notFound)
            let escaped = own[1].id.replacingOccurrences(of: ":", with: "%3A")
            #expect(try await client.send(.post, "/api/stickers/\(escaped)/use", token: token).status == .ok)
            #expect(try await client.send(.delete, "/api/stickers/\(own[0].id)", token: other).status == .notFound)
            #expect(try await client.get("/api/stickers/pack/custom", token: other).json(StickersBody.self).stickers.isEmpty)
            // A refused image gives its reservation back; deleting one frees a slot.
            #expect(try await client.uploadOwn(token, Data("not an image".utf8)).status == .tooManyRequests)
            #expect(try await client.send(.delete, "/api/stickers/\(own[0].id)", token: token).status == .noContent)
            #expect(try await client.uploadOwn(token, Data("not an image".utf8)).status == .badRequest)
            #expect(try await client.uploadOwn(token, images[0]).status == .created)
            #expect(try await app.rows("SELECT stickers FROM sticker_quotas")[0].int("stickers") == 3)
            // A profile that may not add its own stickers may not delete the account's either.
            let admin = try await app.apiKey(["admin"])
            #expect(try await client.comp(app, userID: try await app.userID(token: token), plan: "pro_monthly", key: admin).status == .ok)
            let kid = try await client.createProfile(token, #"{"name":"Kid","canMakePurchases":false,"canUseCustomContentTypes":false}"#)
                .json(ProfileBody.self)
            #expect(try await client.selectProfile(token, kid.id).status == .ok)
            let remaining = try await client.get("/api/stickers/pack/custom", token: token).json(StickersBody.self).stickers
            #expect(try await client.send(.delete, "/api/stickers/\(remaining[0].id)", token: token).status == .forbidden)
            #expect(try await client.uploadOwn(token, images[1]).status == .forbidden)
        }
    }
}
