import Clock
import Foundation
import Logging
import Storage

/// Where an upload's image goes before its row is written: checked and thumbnailed off the event loops, its files kept
/// by content (Media's image worker and blob store, handed over at wiring); and where files nothing uses any more go.
public protocol UploadedImages: Sendable {
    func store(_ data: Data, owner: String, logger: Logger) async throws -> StoredImage
    /// Removes a file nothing references any more, unless it was written or stored again within `grace` (an upload of
    /// the same bytes may be about to reference it): false when it was kept for that reason, true when it is gone.
    func remove(_ key: String, unlessWrittenWithin grace: TimeInterval) async throws -> Bool
    /// A file that is referenced again: one a removal set aside and did not finish with is put back.
    func keep(_ key: String) async throws
}

/// Who changes the account's own stickers: the account, the acting profile (what it sees) and whether that profile may
/// add and remove the account's own stickers (its `canUseCustomContentTypes`; the owner always may).
public struct Uploader: Sendable {
    public let userID: String
    public let viewer: ContentViewer
    public let mayChangeOwnStickers: Bool
    /// Run first in the transaction that adds or deletes the sticker: the session that asked still holds (Auth's
    /// `AuthService.stillLive`), so an upload whose image was being processed when the session was revoked adds nothing.
    public let authorise: StickerService.Authorisation

    public init(userID: String, viewer: ContentViewer, mayChangeOwnStickers: Bool, authorise: @escaping StickerService.Authorisation = { _ in }) {
        (self.userID, self.viewer, self.mayChangeOwnStickers, self.authorise) = (userID, viewer, mayChangeOwnStickers, authorise)
    }
}

/// The upload workflow, in one place: permission, a reservation in the allowance before any image work, the image
/// work and its files, the row; a failure anywhere after the reservation gives it back, and its files are queued for removal. Deleting gives the allowance
/// back and queues the files for removal (``removeUnusedFiles(logger:grace:limit:)``).
extension StickerContentService {
    public func upload(_ data: Data, name: String?, fileStem: String?, by uploader: Uploader, logger: Logger) async throws -> Sticker {
        guard uploader.mayChangeOwnStickers else { throw EntitlementError.ownStickersNotAllowed(change: false) }
        try await reserveUpload(userID: uploader.userID, bytes: data.count, logger: logger)
        var stored: StoredImage?
        do {
            let image = try await images.store(data, owner: uploader.userID, logger: logger)
            stored = image
            let name = name.flatMap(Sticker.cleanName) ?? fileStem.flatMap(Sticker.cleanName) ?? "sticker"
            return try await addUpload(by: uploader, name: name, image: image, reservedBytes: data.count, logger: logger)
        } catch {
            try? await releaseUpload(userID: uploader.userID, bytes: data.count, logger: logger)
            // Files stored for a sticker that was not added go once nothing else uses them (the same image may be).
            if let stored { await queueFileRemovals([stored.imageKey, stored.thumbnailKey], logger: logger) }
            throw error
        }
    }

    public func deleteUpload(stickerID: String, by uploader: Uploader, logger: Logger) async throws {
        guard uploader.mayChangeOwnStickers else { throw EntitlementError.ownStickersNotAllowed(change: true) }
        try await deleteUpload(by: uploader, stickerID: stickerID, logger: logger)
    }

    /// Queues an unadded upload's files; failing that (the database down), they stay, unreferenced and never served.
    public func queueFileRemovals(_ keys: [String], logger: Logger) async {
        do {
            try await database.transaction(logger: logger) { tx in try await store.queueFileRemovals(tx, keys, now: clock.now()) }
        } catch {
            logger.warning("an unadded upload's files were not queued for removal", metadata: ["error": .error(error)])
        }
    }
}

/// For module tests and tools that add no uploads: refuses every image.
public struct NoUploadedImages: UploadedImages {
    public init() {}
    public func store(_ data: Data, owner: String, logger: Logger) async throws -> StoredImage {
        throw EntitlementError.invalid(["Images cannot be stored here."])
    }
    public func remove(_ key: String, unlessWrittenWithin grace: TimeInterval) async throws -> Bool { true }
    public func keep(_ key: String) async throws {}
}
