import Foundation
import Logging
import Storage

/// The file side of an upload, done before the transaction (libvips, the blob store): what was stored.
public struct StoredImage: Sendable, Equatable {
    public let imageKey: String
    public let thumbnailKey: String
    public let fileType: String
    public let width: Int
    public let height: Int
    public let isAnimated: Bool

    public init(imageKey: String, thumbnailKey: String, fileType: String, width: Int, height: Int, isAnimated: Bool) {
        (self.imageKey, self.thumbnailKey, self.fileType, self.width, self.height, self.isAnimated) =
            (imageKey, thumbnailKey, fileType, width, height, isAnimated)
    }
}

/// Who may fetch a media file: anyone (a free pack's file, or a preview thumbnail) or only holders of a signed URL.
public enum MediaAccess: Sendable, Equatable {
    case publicFile
    case signedOnly
    case unknown
}

/// Stickers inside packs: operators add them, users see the stickers of packs they can use.
public struct StickerContentService: Sendable {
    let database: any Database
    let packs: StickerPackStore
    let subscriptions: SubscriptionStore
    let audit: any AuditTrail
    let clock: any TimeSource
    let store = StickerStore()

    public init(database: any Database, packs: StickerPackStore, subscriptions: SubscriptionStore, audit: any AuditTrail, clock: any TimeSource) {
        (self.database, self.packs, self.subscriptions, self.audit, self.clock) = (database, packs, subscriptions, audit, clock)
    }

    /// Adds a stored image to a pack as `packId:slug(name)`, audited; 409 when that id exists.
    public func add(
        packID: String, name: String, tags: [String], image: StoredImage, actor: String, ip: String?, logger: Logger
    ) async throws -> Sticker {
        let id = "\(packID):\(Sticker.slug(name))"
        return try await database.transaction(logger: logger) { tx in
            guard try await packs.pack(tx, id: packID) != nil else { throw EntitlementError.packNotFound }
            let now = clock.now()
            guard try await store.insert(tx, id: id, packID: packID, name: name, stored: image, tags: tags, now: now) else {
                throw EntitlementError.stickerExists(id)
            }
            try await audit.record(tx, at: now, actor: actor, action: "sticker_added", subject: id, ip: ip, detail: nil)
            guard let sticker = try await store.stickers(tx, packID: packID).first(where: { $0.id == id }) else {
                throw EntitlementError.packNotFound
            }
            return sticker
        }
    }

    /// The stickers of an active pack, for a user who can use it; a locked premium pack answers `packLocked` with its
    /// preview thumbnails. `premium` tells the caller to sign the files' URLs.
    public func stickers(userID: String, packID: String, logger: Logger) async throws -> (stickers: [Sticker], premium: Bool) {
        try await database.readTransaction(logger: logger) { tx in
            guard let pack = try await packs.pack(tx, id: packID), pack.isActive else { throw EntitlementError.packNotFound }
            let plan = try await subscriptions.currentPlan(userID: userID, now: clock.now(), tx)
            let bought = try await packs.unlockedIDs(tx, userID: userID)
            let stickers = try await store.stickers(tx, packID: packID)
            if packs.isLocked(pack, plan: plan, bought: bought) {
                throw EntitlementError.packLocked(previewKeys: stickers.prefix(3).map(\.file.thumbnailKey))
            }
            return (stickers, pack.isPremium)
        }
    }

    /// Whether a media file may be served without a signature.
    public func access(blobKey: String, logger: Logger) async throws -> MediaAccess {
        try await database.withConnection(logger: logger) { tx in
            guard let owner = try await store.owner(tx, blobKey: blobKey) else { return .unknown }
            if owner.isPreview { return .publicFile }
            guard let pack = try await packs.pack(tx, id: owner.packID) else { return .unknown }
            return pack.isPremium ? .signedOnly : .publicFile
        }
    }
}
