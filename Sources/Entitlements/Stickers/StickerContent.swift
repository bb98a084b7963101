import Clock
import Events
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
    /// The stored image's size (what counts against a user's upload allowance).
    public let bytes: Int

    public init(imageKey: String, thumbnailKey: String, fileType: String, width: Int, height: Int, isAnimated: Bool, bytes: Int) {
        (self.imageKey, self.thumbnailKey, self.fileType, self.width, self.height, self.isAnimated, self.bytes) =
            (imageKey, thumbnailKey, fileType, width, height, isAnimated, bytes)
    }
}

/// Who may fetch a media file: anyone (a free pack's file, a preview thumbnail, an icon) or only holders of a signed URL.
public enum MediaAccess: Sendable, Equatable {
    case publicFile
    case signedOnly
    case unknown
}

/// Stickers a user can see, with whether their files need signed URLs.
public struct StickerList: Sendable {
    public let stickers: [Sticker]
    /// Sticker ids whose files are private (premium packs, own uploads).
    public let signed: Set<String>
}

/// A user's upload allowance.
public struct UploadAllowance: Sendable {
    public var maxStickers = 200
    public var maxBytes = 50 * 1024 * 1024
    public init() {}
}

/// Stickers inside packs: operators add and edit them, users see the stickers of packs they can use, upload their own,
/// and record uses (recent, popularity).
public struct StickerContentService: Sendable {
    public let database: any Database
    let packs: StickerPackStore
    let subscriptions: SubscriptionStore
    let audit: any AuditTrail
    let clock: any TimeSource
    let allowance: UploadAllowance
    /// Where uploads' images are checked and stored (``upload(_:name:fileStem:by:logger:)``).
    let images: any UploadedImages
    let store = StickerStore()

    public init(
        database: any Database, packs: StickerPackStore, subscriptions: SubscriptionStore, audit: any AuditTrail, clock: any TimeSource,
        allowance: UploadAllowance = UploadAllowance(), images: any UploadedImages = NoUploadedImages()
    ) {
        (self.database, self.packs, self.subscriptions, self.audit, self.clock, self.allowance, self.images) =
            (database, packs, subscriptions, audit, clock, allowance, images)
    }

    // MARK: - Operators

    /// One image for ``add(packID:items:actor:ip:logger:)``.
    public struct NewSticker: Sendable {
        public let name: String
        public let tags: [String]
        public let image: StoredImage
        public init(name: String, tags: [String], image: StoredImage) { (self.name, self.tags, self.image) = (name, tags, image) }
    }

    /// Adds stored images to a catalog pack as `packId:slug(name)`, all or none, audited; 409 when an id exists.
    public func add(packID: String, items: [NewSticker], actor: String, ip: String?, logger: Logger) async throws -> [Sticker] {
        try await database.transaction(logger: logger) { tx in
            guard try await packs.pack(tx, id: packID) != nil else { throw EntitlementError.packNotFound }
            let now = clock.now()
            var added: [Sticker] = []
            for item in items {
                let id = "\(packID):\(Sticker.slug(item.name))"
                guard try await store.insert(tx, id: id, packID: packID, owner: nil, name: item.name, stored: item.image, tags: item.tags, now: now)
                else { throw EntitlementError.stickerExists(id) }
                try await audit.record(tx, at: now, actor: actor, action: "sticker_added", subject: id, ip: ip, detail: nil)
                guard let sticker = try await store.sticker(tx, id: id) else { throw EntitlementError.stickerNotFound }
                added.append(sticker)
            }
            try await packs.touch(tx, packID)
            return added
        }
    }

    /// Whether a catalog pack exists (checked before an upload's image work).
    public func packExists(_ packID: String, logger: Logger) async throws -> Bool {
        try await database.withConnection(logger: logger) { try await packs.pack($0, id: packID) != nil }
    }

    /// Changes a catalog sticker's name, tags or order (its id stays), audited.
    public func update(
        id: String, name: String?, tags: [String]?, sortOrder: Int?, actor: String, ip: String?, logger: Logger
    ) async throws -> Sticker {
        try await database.transaction(logger: logger) { tx in
            guard try await store.update(tx, id: id, name: name, tags: tags, sortOrder: sortOrder) else { throw EntitlementError.stickerNotFound }
            try await audit.record(tx, at: clock.now(), actor: actor, action: "sticker_changed", subject: id, ip: ip, detail: nil)
            guard let sticker = try await store.sticker(tx, id: id) else { throw EntitlementError.stickerNotFound }
            try await packs.touch(tx, sticker.packID)
            return sticker
        }
    }

    /// Removes a catalog sticker (and its uses), audited; its files go once nothing uses them. Messages that name it
    /// keep a dangling id.
    public func delete(id: String, actor: String, ip: String?, logger: Logger) async throws {
        try await database.transaction(logger: logger) { tx in
            guard let sticker = try await store.sticker(tx, id: id), sticker.packID != Sticker.customPackID else {
                throw EntitlementError.stickerNotFound
            }
            _ = try await store.delete(tx, id: id)
            try await store.queueFileRemovals(tx, [sticker.file.imageKey, sticker.file.thumbnailKey], now: clock.now())
            try await packs.touch(tx, sticker.packID)
            try await audit.record(tx, at: clock.now(), actor: actor, action: "sticker_deleted", subject: id, ip: ip, detail: nil)
        }
    }

    // MARK: - Users

    /// Reserves one upload of `bytes` in the user's allowance (before any image work); 429-style refusal when full.
    func reserveUpload(userID: String, bytes: Int, logger: Logger) async throws {
        let allowance = allowance
        let reserved = try await database.transaction(logger: logger) { tx in
            try await store.reserveUpload(tx, userID: userID, bytes: bytes, maxStickers: allowance.maxStickers, maxBytes: allowance.maxBytes)
        }
        guard reserved else { throw EntitlementError.uploadQuotaExceeded(maxStickers: allowance.maxStickers, maxBytes: allowance.maxBytes) }
    }

    /// Gives a reservation back when the upload stored nothing.
    func releaseUpload(userID: String, bytes: Int, logger: Logger) async throws {
        try await database.transaction(logger: logger) { tx in try await store.releaseUpload(tx, userID: userID, bytes: bytes) }
    }

    /// Adds an upload to the user's own pack (`custom`); its id is `custom:<random>`. The allowance keeps the stored
    /// size: the difference to the `reservedBytes` sent is given back, or taken, within the allowance's bytes.
    func addUpload(by uploader: Uploader, name: String, image: StoredImage, reservedBytes: Int, logger: Logger) async throws -> Sticker {
        let id = "custom:\(FreshID.uuid())"
        let allowance = allowance
        let (userID, profileID) = (uploader.userID, uploader.viewer.profileID)
        return try await database.transaction(logger: logger) { tx in
            try await uploader.authorise(tx)
            _ = try await store.insert(
                tx, id: id, packID: StickerStore.customPack(userID), owner: userID, name: name, stored: image, tags: [], now: clock.now(),
                ownerProfile: profileID)
            guard try await store.adjustUpload(tx, userID: userID, by: image.bytes - reservedBytes, maxBytes: allowance.maxBytes) else {
                throw EntitlementError.uploadQuotaExceeded(maxStickers: allowance.maxStickers, maxBytes: allowance.maxBytes)
            }
            guard let sticker = try await store.sticker(tx, id: id) else { throw EntitlementError.stickerNotFound }
            return sticker
        }
    }

    /// Deletes one of the user's own uploads and gives its allowance back; its files are queued for removal once
    /// nothing uses them (``removeUnusedFiles(logger:grace:limit:)``), so deleted uploads do not fill the disk.
    /// A viewer that does not see the upload (another profile's, for a profile with a maximum) gets `stickerNotFound`, as
    /// for an id that does not exist.
    func deleteUpload(by uploader: Uploader, stickerID: String, logger: Logger) async throws {
        let (userID, viewer) = (uploader.userID, uploader.viewer)
        return try await database.transaction(logger: logger) { tx in
            try await uploader.authorise(tx)
            guard let sticker = try await store.sticker(tx, id: stickerID), viewer.sees(sticker) else { throw EntitlementError.stickerNotFound }
            let deleted = try await tx.query(
                "DELETE FROM stickers WHERE id = ? AND owner_user_id = ? RETURNING bytes, image_key, thumbnail_key", [sticker.id, userID])
            guard let row = deleted.first, let bytes = row.optionalInt("bytes") else { throw EntitlementError.stickerNotFound }
            try await tx.query("DELETE FROM sticker_uses WHERE sticker_id = ?", [stickerID])
            try await store.releaseUpload(tx, userID: userID, bytes: Int(bytes))
            try await store.queueFileRemovals(tx, [try row.string("image_key"), try row.string("thumbnail_key")], now: clock.now())
        }
    }

    /// The stickers of a pack the user can use (`custom`: their own uploads); a locked premium pack answers `packLocked`
    /// with its preview thumbnails, a pack rated above `maxRating` (the acting profile's) `contentRestricted`.
    public func stickers(userID: String, packID: String, viewer: ContentViewer, logger: Logger) async throws -> StickerList {
        let maxRating = viewer.maxRating
        return try await database.readTransaction(logger: logger) { tx in
            if packID == Sticker.customPackID {
                let own = try await store.stickers(tx, packID: StickerStore.customPack(userID)).filter(viewer.sees)
                return StickerList(stickers: own, signed: Set(own.map(\.id)))
            }
            guard let pack = try await packs.pack(tx, id: packID), pack.isActive else { throw EntitlementError.packNotFound }
            try StickerPackStore.requireRating(pack, under: maxRating)
            let plan = try await subscriptions.currentPlan(userID: userID, now: clock.now(), tx)
            let stickers = try await store.stickers(tx, packID: packID)
            if packs.isLocked(pack, plan: plan, bought: try await packs.unlockedIDs(tx, userID: userID)) {
                throw EntitlementError.packLocked(previewKeys: stickers.prefix(3).map(\.file.thumbnailKey))
            }
            return StickerList(stickers: stickers, signed: pack.isPremium ? Set(stickers.map(\.id)) : [])
        }
    }

    /// What the user's catalog depends on, in one statement: the plan that applies now, the packs they bought, every
    /// pack's last change (a sticker added, changed or deleted touches its pack) and their own uploads. Equal versions
    /// mean equal catalogs within one URL-signing window, so a revalidation reads no stickers and renders nothing. The
    /// acting profile's maximum rating is part of it: two profiles of one account see different catalogs.
    public func catalogVersion(userID: String, viewer: ContentViewer, logger: Logger) async throws -> String {
        let engine = database.engine
        let rows = try await database.quickQuery(
            StickerStore.versionQuery(engine), [userID, StickerStore.customPack(userID), StickerStore.customPack(userID), userID], logger: logger)
        guard let row = rows.first else { return "" }
        return try catalogVersion(row: row, viewer: viewer)
    }

    /// The version from a row of ``StickerStore/versionQuery(_:)`` or ``StickerStore/versionsQuery(sessions:)``.
    /// A restricted viewer's version also names the profile: it sees its own uploads only, so two profiles with one maximum
    /// (switching on one device, one cache) never share a version.
    func catalogVersion(row: SQLRow, viewer: ContentViewer) throws -> String {
        let subscription = row.optionalString("user_id") == nil ? nil : try Subscription(row: row)
        let entitled = subscription.flatMap { $0.isEntitled(at: clock.now()) ? $0.planID : nil } ?? subscriptions.catalog.freePlan.id
        let parts =
            [entitled, row.optionalString("bought") ?? "", viewer.maxRating.map { "\($0.rawValue):\(viewer.profileID ?? "")" } ?? "any"]
            + ["packs_changed", "packs", "own", "own_changed"].map { String(row.optionalInt($0) ?? 0) }
        return parts.joined(separator: "|")
    }

    /// Every sticker the user can use now, by pack in catalog order (the editor catalog), plus their own uploads, and the
    /// catalog's version (``catalogVersion(userID:viewer:logger:)``) read in the same transaction.
    public func usable(
        userID: String, viewer: ContentViewer, logger: Logger
    ) async throws -> (packs: [StickerPack], list: StickerList, version: String) {
        let maxRating = viewer.maxRating
        // The version first: a change between the two reads makes the ETag older than the body, never newer (the next
        // revalidation then answers 200 again instead of a wrong 304).
        let version = try await catalogVersion(userID: userID, viewer: viewer, logger: logger)
        return try await database.readTransaction(logger: logger) { tx in
            let open = try await usablePacks(tx, userID: userID, maxRating: maxRating)
            let stickers = try await store.stickers(tx, packIDs: open.map(\.id) + [StickerStore.customPack(userID)]).filter(viewer.sees)
            let premium = Set(open.filter(\.isPremium).map(\.id))
            let order = Dictionary(uniqueKeysWithValues: open.enumerated().map { ($1.id, $0) })
            let sorted = stickers.sorted { (order[$0.packID] ?? Int.max, $0.sortOrder, $0.id) < (order[$1.packID] ?? Int.max, $1.sortOrder, $1.id) }
            let signed = Set(sorted.filter { premium.contains($0.packID) || $0.packID == Sticker.customPackID }.map(\.id))
            return (open, StickerList(stickers: sorted, signed: signed), version)
        }
    }

    /// Records a use by a profile: 404 for a sticker it cannot use (a locked pack's, one rated above `maxRating`, another
    /// user's upload).
    public func use(userID: String, profileID: String, viewer: ContentViewer, stickerID: String, logger: Logger) async throws {
        try await database.transaction(logger: logger) { tx in
            guard let sticker = try await store.sticker(tx, id: stickerID), viewer.sees(sticker),
                try await canUse(tx, sticker: sticker, userID: userID, maxRating: viewer.maxRating)
            else {
                throw EntitlementError.stickerNotFound
            }
            try await store.recordUse(tx, stickerID: stickerID, userID: userID, profileID: profileID, now: clock.now())
        }
    }

    /// The profile's last 20 used stickers that it can still use.
    public func recent(userID: String, profileID: String, viewer: ContentViewer, logger: Logger) async throws -> StickerList {
        try await database.readTransaction(logger: logger) { tx in
            let open = try await usablePacks(tx, userID: userID, maxRating: viewer.maxRating)
            let ids = Set(open.map(\.id))
            let premium = Set(open.filter(\.isPremium).map(\.id))
            // Uses are recorded only for usable stickers; what is no longer usable (or visible to this viewer) drops out.
            let recent = try await store.recent(tx, userID: userID, profileID: profileID, limit: 60)
                .filter { (ids.contains($0.packID) || $0.packID == Sticker.customPackID) && viewer.sees($0) }
            let visible = Array(recent.prefix(20))
            return StickerList(
                stickers: visible, signed: Set(visible.filter { premium.contains($0.packID) || $0.packID == Sticker.customPackID }.map(\.id)))
        }
    }

    /// Stickers whose name or tags contain `query`, among packs the user can use and their own uploads; most used first.
    public func search(
        userID: String, viewer: ContentViewer, query: String, limit: Int, offset: Int, logger: Logger
    ) async throws -> StickerList {
        try await database.readTransaction(logger: logger) { tx in
            let open = try await usablePacks(tx, userID: userID, maxRating: viewer.maxRating)
            let premium = Set(open.filter(\.isPremium).map(\.id))
            // A viewer with a maximum finds its own uploads only (``ContentViewer/sees(_:)``, in SQL so pages stay full).
            let found = try await store.search(
                tx, packIDs: open.map(\.id) + [StickerStore.customPack(userID)], query: query, limit: limit, offset: offset,
                uploadsOf: viewer.maxRating == nil ? .none : .some(viewer.profileID))
            return StickerList(
                stickers: found, signed: Set(found.filter { premium.contains($0.packID) || $0.packID == Sticker.customPackID }.map(\.id)))
        }
    }

    /// Per catalog pack: sticker count and the first three thumbnails.
    public func summaries(logger: Logger) async throws -> [String: (count: Int, previews: [String])] {
        try await database.withConnection(logger: logger) { try await store.summaries($0) }
    }

    /// Whether a media file may be served without a signature: public when any use of it is (a free pack's file, a
    /// preview, a pack icon; identical bytes are one file), signed-only when it is used only privately.
    public func access(blobKey: String, logger: Logger) async throws -> MediaAccess {
        try await database.withConnection(logger: logger) { tx in
            if try await tx.first("SELECT id FROM sticker_packs WHERE icon_url LIKE ? LIMIT 1", ["%/\(blobKey)"]) != nil { return .publicFile }
            let uses = try await store.uses(tx, blobKey: blobKey)
            guard !uses.isEmpty else { return .unknown }
            for use in uses where !use.isCustom {
                if use.isPreview { return .publicFile }
                if let pack = try await packs.pack(tx, id: use.packID), !pack.isPremium { return .publicFile }
            }
            return .signedOnly
        }
    }

    /// The active packs open to the user (free, in the plan or bought) that a profile with `maxRating` may see.
    func usablePacks(_ tx: any SQLExecutor, userID: String, maxRating: ContentRating?) async throws -> [StickerPack] {
        let plan = try await subscriptions.currentPlan(userID: userID, now: clock.now(), tx)
        let bought = try await packs.unlockedIDs(tx, userID: userID)
        return try await packs.all(tx, activeOnly: true).filter {
            !packs.isLocked($0, plan: plan, bought: bought) && StickerPackStore.isVisible($0, to: maxRating)
        }
    }

    func canUse(_ tx: any SQLExecutor, sticker: Sticker, userID: String, maxRating: ContentRating?) async throws -> Bool {
        if sticker.packID == Sticker.customPackID { return try await isOwn(sticker, userID: userID, tx) }
        return try await usablePacks(tx, userID: userID, maxRating: maxRating).contains { $0.id == sticker.packID }
    }

    func isOwn(_ sticker: Sticker, userID: String, _ tx: any SQLExecutor) async throws -> Bool {
        try await tx.first("SELECT id FROM stickers WHERE id = ? AND owner_user_id = ?", [sticker.id, userID]) != nil
    }
}
