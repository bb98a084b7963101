import Clock
import Entitlements
import Events
import Foundation
import Logging
import Storage
import Synchronization
import TestSupport
import Testing

/// The upload workflow in its module, with the image side replaced: the allowance is reserved before any image work and
/// given back whatever fails after it; a profile without the permission reserves and stores nothing; a delete removes
/// the files nothing else uses.
@Suite("Sticker uploads")
struct StickerUploadTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Stores in memory; fails every image whose first byte is 0; one whose first byte is 0xFF comes out ten times its
    /// size, any other at half; counts what it was asked.
    final class Images: UploadedImages {
        let calls = Mutex<(stored: Int, removed: [String])>((0, []))
        func store(_ data: Data, owner: String, logger: Logger) async throws -> StoredImage {
            calls.withLock { $0.stored += 1 }
            guard data.first != 0 else { throw EntitlementError.invalid(["The image could not be read."]) }
            let key = String(data.count) + "-" + String(data.first ?? 0)
            return StoredImage(
                imageKey: key + ".png", thumbnailKey: key + "-t.png", fileType: "png", width: 10, height: 10, isAnimated: false,
                bytes: data.first == 0xFF ? data.count * 10 : data.count / 2
            )
        }
        /// Keys whose files count as written within the grace (kept).
        let recent = Mutex<Set<String>>([])
        func keep(_ key: String) async throws {}
        func remove(_ key: String, unlessWrittenWithin grace: TimeInterval) async throws -> Bool {
            guard !recent.withLock({ $0.contains(key) }) else { return false }
            calls.withLock { $0.removed.append(key) }
            return true
        }
    }

    func quota(_ db: any Database) async throws -> (stickers: Int64, bytes: Int64) {
        try await db.withConnection(logger: TestDatabase.logger) { tx in
            guard let row = try await tx.first("SELECT stickers, bytes FROM sticker_quotas WHERE user_id = 'u'", []) else { return (0, 0) }
            return (try row.int("stickers"), try row.int("bytes"))
        }
    }

    @Test(arguments: TestDatabase.engines)
    func reservedFirstGivenBackOnFailureAndFilesRemoved(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let world = try await SubscriptionMachineTests.world(db)
            let images = Images()
            var allowance = UploadAllowance()
            allowance.maxStickers = 2
            let content = StickerContentService(
                database: db, packs: StickerPackStore(catalog: world.store.catalog, clock: world.clock), subscriptions: world.store,
                audit: NoAuditTrail(), clock: world.clock, allowance: allowance, images: images)
            let owner = Uploader(userID: "u", viewer: ContentViewer(profileID: nil, maxRating: nil), mayChangeOwnStickers: true)
            let logger = TestDatabase.logger
            // A failed image gives its reservation back.
            await #expect(throws: EntitlementError.self) {
                try await content.upload(Data([0, 1, 2, 3]), name: nil, fileStem: nil, by: owner, logger: logger)
            }
            #expect(try await quota(db) == (0, 0))
            // A stored one keeps the stored size (half of what was sent here).
            let sticker = try await content.upload(Data([7, 1, 2, 3]), name: "Hat", fileStem: "x", by: owner, logger: logger)
            #expect(sticker.name == "Hat" && sticker.id.hasPrefix("custom:"))
            #expect(try await quota(db) == (1, 2))
            // A profile without the permission reserves and stores nothing.
            let kid = Uploader(userID: "u", viewer: ContentViewer(profileID: "p", maxRating: nil), mayChangeOwnStickers: false)
            await #expect(throws: EntitlementError.ownStickersNotAllowed(change: false)) {
                try await content.upload(Data([7, 1]), name: nil, fileStem: nil, by: kid, logger: logger)
            }
            await #expect(throws: EntitlementError.ownStickersNotAllowed(change: true)) {
                try await content.deleteUpload(stickerID: sticker.id, by: kid, logger: logger)
            }
            #expect(images.calls.withLock { $0.stored } == 2)
            // The allowance is full at two; the second fills it and the third is refused before any image work.
            _ = try await content.upload(Data([8, 1, 2, 3, 4, 5]), name: nil, fileStem: "b", by: owner, logger: logger)
            await #expect(throws: EntitlementError.uploadQuotaExceeded(maxStickers: 2, maxBytes: allowance.maxBytes)) {
                try await content.upload(Data([9]), name: nil, fileStem: nil, by: owner, logger: logger)
            }
            #expect(images.calls.withLock { $0.stored } == 3)
            // Deleting gives the allowance back and queues both files, removed by the next pass.
            try await content.deleteUpload(stickerID: sticker.id, by: owner, logger: logger)
            #expect(try await quota(db) == (1, 3))
            #expect(images.calls.withLock { $0.removed }.isEmpty)
            #expect(try await content.removeUnusedFiles(logger: logger) == 2)
            #expect(images.calls.withLock { $0.removed }.sorted() == ["4-7-t.png", "4-7.png"])
        }
    }

    /// The allowance keeps the stored size within its bytes: an image that comes out larger than it was sent, past the
    /// allowance, is refused and its reservation given back, not stored over the limit.
    @Test(arguments: TestDatabase.engines)
    func anImageThatGrowsPastTheAllowanceIsRefused(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let world = try await SubscriptionMachineTests.world(db)
            var allowance = UploadAllowance()
            allowance.maxBytes = 100
            let content = StickerContentService(
                database: db, packs: StickerPackStore(catalog: world.store.catalog, clock: world.clock), subscriptions: world.store,
                audit: NoAuditTrail(), clock: world.clock, allowance: allowance, images: Images())
            let owner = Uploader(userID: "u", viewer: ContentViewer(profileID: nil, maxRating: nil), mayChangeOwnStickers: true)
            await #expect(throws: EntitlementError.uploadQuotaExceeded(maxStickers: allowance.maxStickers, maxBytes: 100)) {
                try await content.upload(
                    Data([0xFF] + Array(repeating: 1, count: 19)), name: nil, fileStem: nil, by: owner, logger: TestDatabase.logger)
            }
            #expect(try await quota(db) == (0, 0))
            _ = try await content.upload(
                Data([0xFF] + Array(repeating: 1, count: 9)), name: nil, fileStem: nil, by: owner, logger: TestDatabase.logger)
            #expect(try await quota(db) == (1, 100), "up to the allowance is fine")
        }
    }

    /// An upload or delete whose session was revoked while it was under way (`authorise` refuses in the writing
    /// transaction) changes nothing: no sticker, the allowance given back, the stored files removed on the next pass
    /// once nothing uses them; the sticker a revoked delete named stays.
    @Test(arguments: TestDatabase.engines)
    func aRevokedUploaderAddsAndDeletesNothing(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let world = try await SubscriptionMachineTests.world(db)
            let images = Images()
            let content = StickerContentService(
                database: db, packs: StickerPackStore(catalog: world.store.catalog, clock: world.clock), subscriptions: world.store,
                audit: NoAuditTrail(), clock: world.clock, images: images)
            struct Revoked: Error {}
            let viewer = ContentViewer(profileID: nil, maxRating: nil)
            let owner = Uploader(userID: "u", viewer: viewer, mayChangeOwnStickers: true)
            let revoked = Uploader(userID: "u", viewer: viewer, mayChangeOwnStickers: true, authorise: { _ in throw Revoked() })
            let logger = TestDatabase.logger
            await #expect(throws: Revoked.self) {
                try await content.upload(Data([5, 1, 2, 3]), name: nil, fileStem: nil, by: revoked, logger: logger)
            }
            #expect(try await quota(db) == (0, 0))
            #expect(try await content.removeUnusedFiles(logger: logger) == 2)
            #expect(images.calls.withLock { $0.removed }.sorted() == ["4-5-t.png", "4-5.png"])
            let kept = try await content.upload(Data([6, 1, 2, 3]), name: nil, fileStem: nil, by: owner, logger: logger)
            await #expect(throws: Revoked.self) { try await content.deleteUpload(stickerID: kept.id, by: revoked, logger: logger) }
            #expect(try await quota(db) == (1, 2))
            #expect(try await content.removeUnusedFiles(logger: logger) == 0, "nothing queued by a refused delete")
        }
    }

    /// The removal queue is in the database: a process started afresh (a new service over the same database) removes
    /// what an earlier one queued; a file referenced again when its turn comes leaves the queue and stays; one written
    /// within the grace is looked at again a grace later.
    @Test(arguments: TestDatabase.engines)
    func queuedRemovalsOutliveTheProcessAndSpareFilesInUse(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let world = try await SubscriptionMachineTests.world(db)
            func service(_ images: Images) -> StickerContentService {
                StickerContentService(
                    database: db, packs: StickerPackStore(catalog: world.store.catalog, clock: world.clock), subscriptions: world.store,
                    audit: NoAuditTrail(), clock: world.clock, images: images)
            }
            let owner = Uploader(userID: "u", viewer: ContentViewer(profileID: nil, maxRating: nil), mayChangeOwnStickers: true)
            let logger = TestDatabase.logger
            let before = service(Images())
            let gone = try await before.upload(Data([7, 1, 2]), name: nil, fileStem: nil, by: owner, logger: logger)
            let shared = try await before.upload(Data([8, 1, 2]), name: nil, fileStem: nil, by: owner, logger: logger)
            _ = try await before.upload(Data([8, 1, 2]), name: nil, fileStem: nil, by: owner, logger: logger)
            let young = try await before.upload(Data([9, 1, 2]), name: nil, fileStem: nil, by: owner, logger: logger)
            for sticker in [gone, shared, young] { try await before.deleteUpload(stickerID: sticker.id, by: owner, logger: logger) }
            let images = Images()
            images.recent.withLock { $0 = ["3-9.png", "3-9-t.png"] }
            let after = service(images)
            #expect(try await after.removeUnusedFiles(logger: logger) == 2)
            #expect(images.calls.withLock { $0.removed }.sorted() == ["3-7-t.png", "3-7.png"], "the shared files stay")
            let queued = try await db.withConnection(logger: logger) { tx in
                try await tx.query("SELECT blob_key FROM sticker_file_removals ORDER BY blob_key", []).map { try $0.string("blob_key") }
            }
            #expect(queued == ["3-9-t.png", "3-9.png"], "only the recently written files stay queued")
            images.recent.withLock { $0 = [] }
            #expect(try await after.removeUnusedFiles(logger: logger) == 0, "not before a grace has passed")
            world.clock.advance(seconds: StickerContentService.fileRemovalGrace)
            #expect(try await after.removeUnusedFiles(logger: logger) == 2)
            #expect(try await after.removeUnusedFiles(logger: logger) == 0)
        }
    }
}
