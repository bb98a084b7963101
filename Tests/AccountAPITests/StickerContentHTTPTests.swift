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

@Suite("Sticker content over HTTP")
struct StickerContentHTTPTests {
    @Test(arguments: TestDatabase.engines)
    func premiumFilesOpenOnlyWithTheirPackAndASignature(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let admin = try await app.apiKey(["admin"])
            for pack in [#"{"id":"free-fun","name":"Free","category":"emoji"}"#, #"{"id":"gold","name":"Gold","category":"emoji","tokenPrice":2}"#] {
                #expect(try await client.send(.post, "/api/admin/stickers/packs", token: admin, json: pack).status == .created)
            }
            let png = try ImageProcessor.testPNG(width: 400, height: 200)
            let free = try await client.uploadStickers(admin, pack: "free-fun", files: [("Party Hat.png", png)], tags: "party, hat")
            #expect(free.status == .created)
            let freeSticker = try #require(try free.json(StickersBody.self).stickers.first)
            #expect(freeSticker.id == "free-fun:party-hat" && freeSticker.name == "Party Hat" && freeSticker.tags == ["party", "hat"])
            #expect(freeSticker.width == 400 && freeSticker.height == 200 && freeSticker.fileType == "png")
            let goldFiles = try (0..<4).map { ("g\($0).png", try ImageProcessor.testPNG(width: 300 + $0, height: 300)) }
            #expect(try await client.uploadStickers(admin, pack: "gold", files: goldFiles).status == .created)

            let token = try await client.signUpAndVerify(app, email: "st1@example.com")
            // A free pack: public URLs, served to anyone, immutable, with ETag and ranges.
            let listed = try await client.get("/api/stickers/pack/free-fun", token: token).json(StickersBody.self).stickers
            #expect(listed.map(\.id) == ["free-fun:party-hat"] && !listed[0].imageUrl.contains("sig="))
            let file = try await client.get(listed[0].imageUrl, token: nil)
            #expect(file.status == .ok && file.headers[.contentType] == "image/png" && file.headers[.cacheControl]?.contains("immutable") == true)
            #expect(Data(file.body.readableBytesView).starts(with: [0x89, 0x50, 0x4E, 0x47]))
            let etag = try #require(file.headers[.eTag])
            #expect(try await client.execute(uri: listed[0].imageUrl, method: .get, headers: [.ifNoneMatch: etag]).status == .notModified)
            let range = try await client.execute(uri: listed[0].imageUrl, method: .get, headers: [.range: "bytes=0-3"])
            #expect(range.status == .partialContent && range.body.readableBytes == 4)
            let thumb = try await client.get(listed[0].thumbnailUrl, token: nil)
            var relaxed = ImageProcessor.Rules()
            relaxed.minSide = 1
            let thumbInfo = try ImageProcessor(rules: relaxed).inspect(Data(thumb.body.readableBytesView))
            #expect(thumbInfo.width == 100 && thumbInfo.height == 50)

            // A locked premium pack: 403 pack_locked with its previews (public); its files need a signature.
            let locked = try await client.get("/api/stickers/pack/gold", token: token)
            #expect(try locked.status == .forbidden && locked.problem().code == "pack_locked")
            struct LockedBody: Decodable { let previewStickers: [String] }
            let previews = try locked.json(LockedBody.self).previewStickers
            #expect(previews.count == 3)
            #expect(try await client.get(previews[0], token: nil).status == .ok)
            let rows = try await app.rows("SELECT image_key, thumbnail_key FROM stickers WHERE pack_id = 'gold' ORDER BY sort_order")
            let premiumImage = try rows[0].string("image_key")
            #expect(try await client.get("/media/\(premiumImage)", token: nil).status == .forbidden)
            #expect(try await client.get("/media/\(try rows[3].string("thumbnail_key"))", token: nil).status == .forbidden)  // not a preview

            // Unlocked: signed URLs that work; altered or expired ones do not.
            #expect(try await client.send(.post, "/api/stickers/packs/gold/unlock", token: token).status == .ok)
            let open = try await client.get("/api/stickers/pack/gold", token: token).json(StickersBody.self).stickers
            #expect(open.count == 4 && open.allSatisfy { $0.imageUrl.contains("sig=") })
            #expect(try await client.get(open[0].imageUrl, token: nil).status == .ok)
            let tampered = open[0].imageUrl.replacingOccurrences(of: "exp=", with: "exp=9")
            #expect(try await client.get(tampered, token: nil).status == .forbidden)
            let expired = app.dependencies.media.signer.signedURL(premiumImage, now: Date().addingTimeInterval(-7200))
            #expect(try await client.get(expired, token: nil).status == .forbidden)
            #expect(try await client.get("/media/\(String(repeating: "0", count: 64)).png", token: nil).status == .notFound)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func planIncludedPacksCloseAgainAfterADowngrade(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let admin = try await app.apiKey(["admin"])
            let pack = #"{"id":"pro-pack","name":"Pro","category":"emoji","includedInPlans":["pro_monthly"]}"#
            #expect(try await client.send(.post, "/api/admin/stickers/packs", token: admin, json: pack).status == .created)
            #expect(
                try await client.uploadStickers(admin, pack: "pro-pack", files: [("a.png", try ImageProcessor.testPNG(width: 256, height: 256))])
                    .status == .created)
            let token = try await client.signUpAndVerify(app, email: "st2@example.com")
            let user = try await app.userID(token: token)
            #expect(try await client.get("/api/stickers/pack/pro-pack", token: token).status == .forbidden)
            #expect(try await client.comp(app, userID: user, plan: "pro_monthly", key: admin).status == .ok)
            #expect(try await client.get("/api/stickers/pack/pro-pack", token: token).json(StickersBody.self).stickers.count == 1)
            #expect(try await client.send(.delete, "/api/admin/users/\(user)/subscription", token: admin).status == .noContent)
            #expect(try await client.get("/api/stickers/pack/pro-pack", token: token).status == .forbidden)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func uploadsAreCheckedByContent(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let admin = try await app.apiKey(["admin"])
            #expect(
                try await client.send(.post, "/api/admin/stickers/packs", token: admin, json: #"{"id":"p","name":"P","category":"emoji"}"#).status
                    == .created)
            let svg = Data(#"<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>"#.utf8)
            let small = try ImageProcessor.testPNG(width: 100, height: 100)
            var oversize = try ImageProcessor.testPNG(width: 300, height: 300)
            oversize.append(Data(count: 600 * 1024))
            var garbage = Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
            garbage.append(Data(repeating: 1, count: 500))
            for (name, data, expected) in [
                ("x.svg", svg, "not a PNG, GIF or WebP"), ("small.png", small, "each side must be 200 to 1024"),
                ("big.png", oversize, "at most 512000"), ("bad.png", garbage, "could not be read"),
            ] {
                let answer = try await client.uploadStickers(admin, pack: "p", files: [(name, data)])
                #expect(try answer.status == .badRequest && answer.problem().detail.contains(expected), "\(name)")
            }
            #expect(try await app.rows("SELECT id FROM stickers").isEmpty)
            let png = try ImageProcessor.testPNG(width: 300, height: 300)
            #expect(try await client.uploadStickers(admin, pack: "p", files: [("one.png", png)]).status == .created)
            let gif = try ImageProcessor.testImage(width: 240, height: 240, pages: 4, format: .gif)
            let animated = try await client.uploadStickers(admin, pack: "p", files: [("dance.gif", gif)])
            #expect(try animated.status == .created && animated.json(StickersBody.self).stickers.first?.fileType == "gif")
            #expect(try await app.rows("SELECT is_animated FROM stickers WHERE id = 'p:dance'")[0].bool("is_animated"))
            let again = try await client.uploadStickers(admin, pack: "p", files: [("one.png", png)])
            #expect(try again.status == .conflict && again.problem().code == "sticker_exists")
            #expect(try await client.uploadStickers(admin, pack: "nope", files: [("one.png", png)]).status == .notFound)
            let user = try await client.signUpAndVerify(app, email: "st3@example.com")
            #expect(try await client.uploadStickers(user, pack: "p", files: [("two.png", png)]).status == .forbidden)
        }
    }

    /// Erasing an account erases its own stickers: their rows, the uses it recorded, its allowance and, on the next
    /// sweep, their files. Another account that uploaded the same image has files of its own (keys are per uploader),
    /// which stay, and so does its sticker.
    @Test(arguments: TestDatabase.engines)
    func erasureTakesTheAccountsOwnStickersAndTheirFiles(engine: Engine) async throws {
        // The test runs the sweeper's file pass itself.
        try await TestApp.run(engine, configure: { $0.sweepIntervalSeconds = 0 }) { client, app in
            let token = try await client.signUpAndVerify(app, email: "erased-art@example.com")
            let other = try await client.signUpAndVerify(app, email: "keeps-art@example.com")
            let own = try ImageProcessor.testPNG(width: 301, height: 300)
            let shared = try ImageProcessor.testPNG(width: 302, height: 300)
            for (who, data) in [(token, own), (token, shared), (other, shared)] {
                #expect(try await client.uploadOwn(who, data).status == .created)
            }
            let user = try await app.userID(token: token)
            let ownRows = try await app.rows("SELECT id, image_key, thumbnail_key FROM stickers WHERE owner_user_id = '\(user)'")
            #expect(ownRows.count == 2)
            let firstID = try ownRows[0].string("id")
            #expect(try await client.send(.post, "/api/stickers/\(firstID)/use", token: token).status.code < 300)
            let media = try FileBlobStore(directory: Backups.mediaDirectory(app.dependencies.config))
            let keys = try ownRows.flatMap { [try $0.string("image_key"), try $0.string("thumbnail_key")] }
            for key in keys { #expect(try await media.get(key) != nil) }
            #expect(
                try await client.send(.delete, "/api/user/me", token: token, json: #"{"password":"correct horse battery"}"#).status == .noContent)
            for table in ["stickers WHERE owner_user_id", "sticker_uses WHERE user_id", "sticker_quotas WHERE user_id"] {
                #expect(try await app.rows("SELECT 1 AS x FROM \(table) = '\(user)'").isEmpty, "\(table)")
            }
            try await app.dependencies.stickerContent.removeUnusedFiles(logger: TestDatabase.logger, grace: 0)
            let kept = try await app.rows("SELECT image_key, thumbnail_key FROM stickers")
            let stillUsed = Set(try kept.flatMap { [try $0.string("image_key"), try $0.string("thumbnail_key")] })
            for key in keys { #expect(try await media.get(key) == nil, "\(key)") }
            #expect(stillUsed.count == 2 && keys.filter(stillUsed.contains).isEmpty, "the same image's files are the other account's own")
            for key in stillUsed { #expect(try await media.get(key) != nil, "\(key)") }
        }
    }

    @Test(arguments: TestDatabase.engines)
    func sharedFilesBatchesAllowancesAndRangesBehave(engine: Engine) async throws {
        // The test runs the sweeper's file pass itself.
        try await TestApp.run(engine, configure: { $0.sweepIntervalSeconds = 0 }) { client, app in
            let admin = try await app.apiKey(["admin"])
            for pack in [#"{"id":"paid","name":"Paid","category":"emoji","tokenPrice":2}"#, #"{"id":"free","name":"Free","category":"emoji"}"#] {
                #expect(try await client.send(.post, "/api/admin/stickers/packs", token: admin, json: pack).status == .created)
            }
            let fillers = try (0..<3).map { ("f\($0).png", try ImageProcessor.testPNG(width: 210 + $0, height: 210)) }
            let shared = try ImageProcessor.testPNG(width: 333, height: 222)
            #expect(try await client.uploadStickers(admin, pack: "paid", files: fillers + [("shared.png", shared)]).status == .created)
            #expect(try await client.uploadStickers(admin, pack: "free", files: [("shared.png", shared)]).status == .created)
            // Identical bytes in a free pack: public, although the same file is a premium pack's (non-preview) sticker.
            let token = try await client.signUpAndVerify(app, email: "st4@example.com")
            let free = try #require(try await client.get("/api/stickers/pack/free", token: token).json(StickersBody.self).stickers.first)
            #expect(try await client.get(free.imageUrl, token: nil).status == .ok)
            #expect(try await client.get(free.thumbnailUrl, token: nil).status == .ok)
            // Ranges that cannot be met are 416; a weak or listed tag revalidates.
            let file = try await client.get(free.imageUrl, token: nil)
            let etag = try #require(file.headers[.eTag])
            let beyond = try await client.execute(uri: free.imageUrl, method: .get, headers: [.range: "bytes=\(file.body.readableBytes)-"])
            #expect(beyond.status == .rangeNotSatisfiable)
            #expect(try await client.execute(uri: free.imageUrl, method: .get, headers: [.ifNoneMatch: "\"x\", W/\(etag)"]).status == .notModified)
            #expect(file.headers[.contentSecurityPolicy]?.contains("sandbox") == true)
            // A batch is all or none; a truncated image is refused; a huge sortOrder is refused (it used to crash uploads).
            let truncated = Data(try ImageProcessor.testPNG(width: 300, height: 300).prefix(400))
            let batch = try await client.uploadStickers(admin, pack: "free", files: [("ok.png", fillers[0].1), ("cut.png", truncated)])
            #expect(batch.status == .badRequest)
            #expect(try await app.rows("SELECT id FROM stickers WHERE pack_id = 'free'").count == 1)
            let order = try await client.send(.patch, "/api/admin/stickers/free:shared", token: admin, json: #"{"sortOrder":9223372036854775807}"#)
            #expect(order.status == .badRequest)
            // The allowance keeps the stored size, and a deleted upload gives it all back and leaves the disk.
            let upload = try await client.uploadOwn(token, try ImageProcessor.testPNG(width: 400, height: 400))
            let mine = try upload.json(UploadBody.self).sticker
            let stored = try await app.rows("SELECT bytes FROM stickers WHERE id = ?", [mine.id])[0].int("bytes")
            #expect(try await app.rows("SELECT bytes FROM sticker_quotas")[0].int("bytes") == stored)
            #expect(try await client.send(.delete, "/api/stickers/\(mine.id)", token: token).status == .noContent)
            #expect(try await app.rows("SELECT stickers, bytes FROM sticker_quotas")[0].int("bytes") == 0)
            let path = try #require(mine.imageUrl.split(separator: "?").first).replacingOccurrences(of: "/media/", with: "")
            // Its files go with the sweeper's pass, once older than the grace an upload of the same bytes is given.
            #expect(try await app.dependencies.stickerContent.removeUnusedFiles(logger: TestDatabase.logger) == 0)
            #expect(try await app.dependencies.media.blobs.get(path) != nil)
            app.clock.advance(seconds: StickerContentService.fileRemovalGrace)
            #expect(try await app.dependencies.stickerContent.removeUnusedFiles(logger: TestDatabase.logger, grace: 0) == 2)
            #expect(try await app.dependencies.media.blobs.get(path) == nil)
            #expect(try await app.rows("SELECT blob_key FROM sticker_file_removals").isEmpty)
        }
    }
}

struct UploadBody: Decodable { let sticker: StickerBody }
