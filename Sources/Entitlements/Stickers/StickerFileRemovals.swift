import Clock
import Foundation
import Logging
import Storage

/// Files of stickers that may be unused: queued in `sticker_file_removals` by the transaction that deletes their rows
/// (an owner's delete, an operator's, an erasure) or, for an upload refused after its files were stored, right after
/// the refusal; removed by the sweeper (the node holding its lease) once no row references them. The queue outlives
/// the process, so a restart loses no removal. Files are stored by content, so one can be shared: a file still
/// referenced when its turn comes leaves the queue and stays. One written again within ``fileRemovalGrace`` (an upload
/// of the same bytes under way, whose row is not committed yet) stays queued for a later pass
/// (``UploadedImages/remove(_:unlessWrittenWithin:)``).
extension StickerStore {
    /// Queues `keys` as of `now`, in sorted order (two transactions queueing the same keys cannot deadlock). A key queued
    /// already is queued again as of now: the upsert waits for a removal under way to settle it, so no key leaves the
    /// queue while a row that referenced it is being deleted.
    func queueFileRemovals(_ tx: any SQLExecutor, _ keys: [String], now: Date) async throws {
        for key in Set(keys).sorted() {
            try await tx.query(
                """
                INSERT INTO sticker_file_removals (blob_key, queued_at_ms) VALUES (?, ?)
                ON CONFLICT (blob_key) DO UPDATE SET queued_at_ms = excluded.queued_at_ms
                """, [key, now])
        }
    }

    /// Locks one queued key if its turn has come (nil: settled meanwhile, by another sweeper, or queued again since).
    func lockDueFileRemoval(_ tx: any SQLExecutor, _ key: String, dueBy: Date) async throws -> String? {
        try await tx.first(
            "SELECT blob_key FROM sticker_file_removals WHERE blob_key = ? AND queued_at_ms <= ?" + tx.dialect.forUpdate, [key, dueBy]
        )?.string("blob_key")
    }

    /// The oldest queued keys whose turn has come (queued at or before `dueBy`).
    func dueFileRemovals(_ tx: any SQLExecutor, dueBy: Date, limit: Int) async throws -> [String] {
        try await tx.query(
            "SELECT blob_key FROM sticker_file_removals WHERE queued_at_ms <= ? ORDER BY queued_at_ms, blob_key LIMIT ?", [dueBy, Int64(limit)]
        ).map { try $0.string("blob_key") }
    }

    /// Settles one queued key: gone from the queue, or (kept) queued again as of `now`.
    func settleFileRemoval(_ tx: any SQLExecutor, _ key: String, requeueAt now: Date?) async throws {
        if let now {
            try await tx.query("UPDATE sticker_file_removals SET queued_at_ms = ? WHERE blob_key = ?", [now, key])
        } else {
            try await tx.query("DELETE FROM sticker_file_removals WHERE blob_key = ?", [key])
        }
    }
}

extension StickerContentService {
    /// How long a file written or stored again is left alone: far longer than an upload takes from storing its files
    /// to committing its row.
    public static let fileRemovalGrace: TimeInterval = 600

    /// In the account's erasure transaction: its own stickers, every use it recorded and its upload allowance are
    /// deleted; their files are queued for removal (``removeUnusedFiles(logger:grace:limit:)``).
    public func accountErased(_ tx: any SQLExecutor, userID: String) async throws {
        let deleted = try await tx.query("DELETE FROM stickers WHERE owner_user_id = ? RETURNING image_key, thumbnail_key", [userID])
        try await tx.query("DELETE FROM sticker_uses WHERE user_id = ?", [userID])
        try await tx.query("DELETE FROM sticker_quotas WHERE user_id = ?", [userID])
        try await store.queueFileRemovals(tx, try deleted.flatMap { [try $0.string("image_key"), try $0.string("thumbnail_key")] }, now: clock.now())
    }

    /// Removes queued files nothing references any more (the sweeper, each pass, on the node holding its lease); returns
    /// how many. A file written within `grace` stays queued and is looked at again a grace later.
    @discardableResult
    public func removeUnusedFiles(logger: Logger, grace: TimeInterval = fileRemovalGrace, limit: Int = 500) async throws -> Int {
        let now = clock.now()
        let due = try await database.withConnection(logger: logger) { tx in try await store.dueFileRemovals(tx, dueBy: now, limit: limit) }
        var removed = 0
        for key in due {
            // One transaction per file, its queue row locked throughout: a file referenced again (a row committed since)
            // leaves the queue and stays, put back if a removal that stopped half-way had set it aside.
            removed += try await database.transaction(logger: logger) { tx in
                guard try await store.lockDueFileRemoval(tx, key, dueBy: now) != nil else { return 0 }
                guard try await !unusedFiles(tx, [key]).isEmpty else {
                    do { try await images.keep(key) } catch {
                        logger.error("a referenced sticker file set aside was not put back", metadata: ["key": "\(key)", "error": .error(error)])
                    }
                    try await store.settleFileRemoval(tx, key, requeueAt: nil)
                    return 0
                }
                let gone: Bool
                do {
                    gone = try await images.remove(key, unlessWrittenWithin: grace)
                } catch {
                    logger.warning("an unused sticker file was not removed; it stays queued", metadata: ["key": "\(key)", "error": .error(error)])
                    gone = false
                }
                try await store.settleFileRemoval(tx, key, requeueAt: gone ? nil : now.addingTimeInterval(grace))
                return gone ? 1 : 0
            }
        }
        return removed
    }

    /// Those of `keys` no sticker and no pack icon uses.
    func unusedFiles(_ tx: any SQLExecutor, _ keys: [String]) async throws -> Set<String> {
        var unused: Set<String> = []
        for key in Set(keys) where !(try await store.isReferenced(tx, blobKey: key)) {
            if try await tx.first("SELECT id FROM sticker_packs WHERE icon_url LIKE ? LIMIT 1", ["%/\(key)"]) == nil { unused.insert(key) }
        }
        return unused
    }
}
