import Foundation
import Logging
import Storage
import Synchronization

/// Files of the account's own stickers that may be unused: queued when an erasure deletes the account's stickers, or
/// when an upload fails after its files were stored, and removed by the sweeper's next pass once no row references
/// them. Checked then, after the transaction that queued them has ended: one rolled back leaves them referenced, and a
/// file still referenced is looked at on two more passes, then kept. Files are stored by content, so one can be shared.
/// In memory: a process stopped meanwhile leaves the files (unreferenced, never served).
final class StickerFileRemovals: Sendable {
    private let pending = Mutex<[(key: String, passes: Int)]>([])

    func queue(_ keys: [String]) { pending.withLock { $0.append(contentsOf: keys.map { ($0, 0) }) } }

    func take() -> [(key: String, passes: Int)] {
        pending.withLock { taken in
            defer { taken = [] }; return taken
        }
    }

    func retry(_ keys: [(key: String, passes: Int)]) {
        pending.withLock { $0.append(contentsOf: keys.filter { $0.passes < 3 }) }
    }
}

extension StickerContentService {
    /// In the account's erasure transaction: its own stickers, every use it recorded and its upload allowance are
    /// deleted; their files are removed by the sweeper's next pass (``removeUnusedFiles(logger:)``).
    public func accountErased(_ tx: any SQLExecutor, userID: String) async throws {
        let deleted = try await tx.query("DELETE FROM stickers WHERE owner_user_id = ? RETURNING image_key, thumbnail_key", [userID])
        try await tx.query("DELETE FROM sticker_uses WHERE user_id = ?", [userID])
        try await tx.query("DELETE FROM sticker_quotas WHERE user_id = ?", [userID])
        removals.queue(try deleted.flatMap { [try $0.string("image_key"), try $0.string("thumbnail_key")] })
    }

    /// Removes the queued files nothing references any more (the sweeper, every pass, on every node); returns how many.
    @discardableResult
    public func removeUnusedFiles(logger: Logger) async throws -> Int {
        let queued = removals.take()
        guard !queued.isEmpty else { return 0 }
        let unused = try await database.withConnection(logger: logger) { tx in try await unusedFiles(tx, queued.map(\.key)) }
        removals.retry(queued.filter { !unused.contains($0.key) }.map { ($0.key, $0.passes + 1) })
        for key in unused { await images.remove(key) }
        return unused.count
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
