import Foundation
import Storage

/// One sticker. Its files are blob-store keys; URLs are made per request (signed unless the file is public).
public struct Sticker: Sendable, Equatable {
    public let id: String
    /// The catalog pack, or ``Sticker/customPackID`` for a user's own uploads.
    public let packID: String
    public let name: String
    /// The stored files and what the image is.
    public let file: StoredImage
    public let tags: [String]
    public let sortOrder: Int
    public let usageCount: Int
    /// For an upload: the profile that made it (nil: none, or made before uploads remembered it).
    public let ownerProfileID: String?

    /// The id apps use for a user's own pack.
    public static let customPackID = "custom"

    static let columns =
        "id, pack_id, owner_user_id, name, image_key, thumbnail_key, file_type, width, height, is_animated, bytes, tags, sort_order, usage_count, "
        + "owner_profile_id"

    init(row: SQLRow) throws {
        id = try row.string("id")
        packID = row.optionalString("owner_user_id") == nil ? try row.string("pack_id") : Self.customPackID
        name = try row.string("name")
        file = StoredImage(
            imageKey: try row.string("image_key"), thumbnailKey: try row.string("thumbnail_key"), fileType: try row.string("file_type"),
            width: Int(try row.int("width")), height: Int(try row.int("height")), isAnimated: try row.bool("is_animated"),
            bytes: Int(try row.int("bytes")))
        tags = try row.string("tags").split(separator: "\n").map(String.init)
        sortOrder = Int(try row.int("sort_order"))
        usageCount = Int(try row.int("usage_count"))
        ownerProfileID = row.optionalString("owner_profile_id")
    }

    /// The highest sort order an operator may give (so the next one never overflows).
    public static let maxSortOrder: Int64 = 1_000_000_000

    /// A display name as stored: control and format characters (line breaks, bidi overrides) dropped, trimmed, at most
    /// 100 characters and 400 bytes; nil when nothing is left.
    public static func cleanName(_ name: String) -> String? {
        let kept = String(
            String.UnicodeScalarView(
                name.unicodeScalars.filter {
                    !CharacterSet.controlCharacters.contains($0) && $0.properties.generalCategory != .format
                })
        ).trimmingCharacters(in: .whitespaces)
        var result = ""
        for character in kept.prefix(100) {
            guard result.utf8.count + String(character).utf8.count <= 400 else { break }
            result.append(character)
        }
        return result.isEmpty ? nil : result
    }

    /// A tag as stored: cleaned like a name (``cleanName(_:)``), at most 40 characters.
    public static func cleanTag(_ tag: String) -> String { cleanName(tag).map { String($0.prefix(40)) } ?? "" }

    /// The id part after the pack: lower-case letters, digits and '-', from a name or file name.
    public static func slug(_ text: String) -> String {
        var slug = ""
        for scalar in text.lowercased().unicodeScalars {
            if scalar.isASCII, CharacterSet.alphanumerics.contains(scalar) {
                slug.unicodeScalars.append(scalar)
            } else if !slug.hasSuffix("-") && !slug.isEmpty {
                slug += "-"
            }
        }
        while slug.hasSuffix("-") { slug.removeLast() }
        let short = String(slug.prefix(48))
        return short.isEmpty ? "sticker" : short
    }
}

/// The rows of `stickers`, `sticker_uses` and `sticker_quotas` (owned by Entitlements with the packs).
struct StickerStore: Sendable {
    /// Tags are stored one per line (a tag never holds a line break: ``Sticker/cleanTag(_:)``); search matches inside.
    static func tagsText(_ tags: [String]) -> String { tags.map(Sticker.cleanTag).filter { !$0.isEmpty }.joined(separator: "\n") }

    /// The inputs of a user's catalog in one row (binds: the user id, their custom pack id twice, the user id): the
    /// subscription row's columns (NULL when none), `bought`, `packs_changed`, `packs`, `own`, `own_changed`.
    static func versionQuery(_ engine: Engine) -> String {
        let dialect = SQLDialect(engine: engine)
        return """
            SELECT s.*,
              (SELECT \(dialect.joined("pack_id")) FROM pack_unlocks WHERE user_id = ?) AS bought,
              (SELECT COALESCE(MAX(updated_at_ms), 0) FROM sticker_packs WHERE is_active) AS packs_changed,
              (SELECT COUNT(*) FROM sticker_packs WHERE is_active) AS packs,
              (SELECT COUNT(*) FROM stickers WHERE pack_id = ?) AS own,
              (SELECT COALESCE(MAX(created_at_ms), 0) + COALESCE(SUM(bytes), 0) FROM stickers WHERE pack_id = ?) AS own_changed
            FROM (SELECT 1 AS one) d LEFT JOIN subscriptions s ON s.user_id = ?
            """
    }

    /// ``versionQuery(_:)`` found with the session (for one token hash, or on PostgreSQL for several): `sessions` is the
    /// session owner's exported query (one bind: the hash, or the hashes joined by commas), whose rows carry the session's
    /// columns and the user's `id`; `profileRating` is its column of the acting profile's maximum content rating. Each row
    /// adds the subscription's columns and the version columns.
    public static func versionsQuery(sessions: String, profileRating: String, engine: Engine) -> String {
        """
        SELECT x.*, sub.user_id, sub.plan_id, sub.status, sub.provider, sub.current_period_start_ms, sub.current_period_end_ms,
               sub.will_renew, sub.pending_plan_id, sub.provider_subscription_id, \(profileRating),
          (SELECT \(SQLDialect(engine: engine).joined("pack_id")) FROM pack_unlocks WHERE user_id = x.id) AS bought,
          c.packs_changed, c.packs,
          (SELECT COUNT(*) FROM stickers WHERE pack_id = 'custom:' || x.id) AS own,
          (SELECT COALESCE(MAX(created_at_ms), 0) + COALESCE(SUM(bytes), 0) FROM stickers WHERE pack_id = 'custom:' || x.id) AS own_changed
        FROM (\(sessions)) x
        CROSS JOIN (SELECT COALESCE(MAX(updated_at_ms), 0) AS packs_changed, COUNT(*) AS packs FROM sticker_packs WHERE is_active) c
        LEFT JOIN subscriptions sub ON sub.user_id = x.id
        """
    }

    /// The storage pack id of a user's own uploads.
    static func customPack(_ userID: String) -> String { "custom:\(userID)" }

    func stickers(_ tx: any SQLExecutor, packID: String) async throws -> [Sticker] {
        try await tx.query("SELECT \(Sticker.columns) FROM stickers WHERE pack_id = ? ORDER BY sort_order, id LIMIT 1000", [packID])
            .map(Sticker.init)
    }

    func sticker(_ tx: any SQLExecutor, id: String) async throws -> Sticker? {
        try await tx.first("SELECT \(Sticker.columns) FROM stickers WHERE id = ?", [id]).map(Sticker.init)
    }

    /// The stickers of `packIDs` (storage ids), at most `limit` per call, in pack then sticker order.
    func stickers(_ tx: any SQLExecutor, packIDs: [String]) async throws -> [Sticker] {
        guard !packIDs.isEmpty else { return [] }
        return try await tx.query(
            "SELECT \(Sticker.columns) FROM stickers WHERE \(tx.dialect.isIn("pack_id")) ORDER BY pack_id, sort_order, id LIMIT 20000",
            [try SQLDialect.list(packIDs)]
        ).map(Sticker.init)
    }

    func insert(
        _ tx: any SQLExecutor, id: String, packID: String, owner: String?, name: String, stored: StoredImage, tags: [String], now: Date,
        ownerProfile: String? = nil
    ) async throws -> Bool {
        let tagsText = Self.tagsText(tags)
        let last = try await tx.first("SELECT COALESCE(MAX(sort_order), 0) AS n FROM stickers WHERE pack_id = ?", [packID])?.optionalInt("n") ?? 0
        let order = min(last, Sticker.maxSortOrder - 1) + 1
        let values: [any SQLBindable] = [
            id, packID, owner, name, stored.imageKey, stored.thumbnailKey, stored.fileType, Int64(stored.width), Int64(stored.height),
            stored.isAnimated, Int64(stored.bytes), tagsText, order, now, ownerProfile,
        ]
        return
            !(try await tx.query(
                """
                INSERT INTO stickers (id, pack_id, owner_user_id, name, image_key, thumbnail_key, file_type, width, height, is_animated, bytes, tags,
                                      sort_order, created_at_ms, owner_profile_id)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING RETURNING id
                """, values
            ).isEmpty)
    }

    func update(_ tx: any SQLExecutor, id: String, name: String?, tags: [String]?, sortOrder: Int?) async throws -> Bool {
        let tagsText = tags.map(Self.tagsText)
        return
            !(try await tx.query(
                """
                UPDATE stickers SET name = COALESCE(?, name), tags = COALESCE(?, tags), sort_order = COALESCE(?, sort_order)
                WHERE id = ? AND owner_user_id IS NULL RETURNING id
                """, [name, tagsText, sortOrder.map(Int64.init), id]
            ).isEmpty)
    }

    /// Deletes a sticker and its uses; returns its owner's bytes for a user upload (to give back to the quota).
    func delete(_ tx: any SQLExecutor, id: String) async throws -> Bool {
        try await tx.query("DELETE FROM sticker_uses WHERE sticker_id = ?", [id])
        return !(try await tx.query("DELETE FROM stickers WHERE id = ? RETURNING id", [id]).isEmpty)
    }

    /// One more use: the profile's recent list, and the sticker's count (one atomic increment) at most once per user and
    /// sticker an hour, so one account cannot push a sticker up everyone's search. The per-user mark is a `sticker_uses`
    /// row with profile `*`, claimed by one conditional upsert (parallel uses of one user count once).
    func recordUse(_ tx: any SQLExecutor, stickerID: String, userID: String, profileID: String, now: Date) async throws {
        let counted = try await tx.query(
            """
            INSERT INTO sticker_uses (user_id, profile_id, sticker_id, used_at_ms) VALUES (?, '*', ?, ?)
            ON CONFLICT (user_id, profile_id, sticker_id) DO UPDATE SET used_at_ms = excluded.used_at_ms
            WHERE sticker_uses.used_at_ms <= ? RETURNING sticker_id
            """, [userID, stickerID, now, now.addingTimeInterval(-3600)])
        if !counted.isEmpty { try await tx.query("UPDATE stickers SET usage_count = usage_count + 1 WHERE id = ?", [stickerID]) }
        try await tx.query(
            """
            INSERT INTO sticker_uses (user_id, profile_id, sticker_id, used_at_ms) VALUES (?, ?, ?, ?)
            ON CONFLICT (user_id, profile_id, sticker_id) DO UPDATE SET used_at_ms = excluded.used_at_ms
            """, [userID, profileID, stickerID, now])
    }

    /// The profile's most recently used stickers, newest first.
    func recent(_ tx: any SQLExecutor, userID: String, profileID: String, limit: Int) async throws -> [Sticker] {
        try await tx.query(
            """
            SELECT \(Sticker.columns.split(separator: ",").map { "s." + $0.trimmingCharacters(in: .whitespaces) }.joined(separator: ", "))
            FROM sticker_uses u JOIN stickers s ON s.id = u.sticker_id
            WHERE u.user_id = ? AND u.profile_id = ? ORDER BY u.used_at_ms DESC, s.id LIMIT ?
            """, [userID, profileID, Int64(limit)]
        ).map(Sticker.init)
    }

    /// Stickers of `packIDs` whose name or a tag contains `query` (case-insensitive), most used first.
    /// `uploadsOf`: the only profile whose uploads (`owner_profile_id`) count (a viewer with a maximum), filtered in SQL so
    /// pages stay full.
    func search(
        _ tx: any SQLExecutor, packIDs: [String], query: String, limit: Int, offset: Int, uploadsOf profile: String?? = .none
    ) async throws -> [Sticker] {
        guard !packIDs.isEmpty else { return [] }
        let escaped = query.lowercased().replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "%", with: "\\%")
            .replacingOccurrences(of: "_", with: "\\_")
        let pattern = "%\(escaped)%"
        var binds: [any SQLBindable] = [try SQLDialect.list(packIDs), pattern, pattern]
        var uploads = ""
        if case .some(let only) = profile {
            uploads = " AND (owner_user_id IS NULL OR owner_profile_id = ?)"
            binds.append(only ?? "")
        }
        binds += [Int64(limit), Int64(offset)]
        return try await tx.query(
            """
            SELECT \(Sticker.columns) FROM stickers WHERE \(tx.dialect.isIn("pack_id"))
              AND (LOWER(name) LIKE ? ESCAPE '\\' OR LOWER(tags) LIKE ? ESCAPE '\\')\(uploads)
            ORDER BY usage_count DESC, id LIMIT ? OFFSET ?
            """, binds
        ).map(Sticker.init)
    }

    /// Every use of a file: (storage pack id, whether a user's upload, whether it is one of its catalog pack's first
    /// three thumbnails). Identical bytes are one file, so a file can have several uses.
    func uses(_ tx: any SQLExecutor, blobKey: String) async throws -> [(packID: String, isCustom: Bool, isPreview: Bool)] {
        let rows = try await tx.query(
            """
            SELECT pack_id, owner_user_id, thumbnail_key = ? AS is_thumbnail FROM stickers
            WHERE image_key = ? OR thumbnail_key = ? LIMIT 100
            """, [blobKey, blobKey, blobKey])
        var uses: [(packID: String, isCustom: Bool, isPreview: Bool)] = []
        for row in rows {
            let packID = try row.string("pack_id")
            if row.optionalString("owner_user_id") != nil {
                uses.append((packID, true, false))
                continue
            }
            var preview = false
            if try row.bool("is_thumbnail") {
                let previews = try await tx.query("SELECT thumbnail_key FROM stickers WHERE pack_id = ? ORDER BY sort_order, id LIMIT 3", [packID])
                preview = try previews.contains { try $0.string("thumbnail_key") == blobKey }
            }
            uses.append((packID, false, preview))
        }
        return uses
    }

    /// Whether any sticker still uses a file (before its file is removed).
    func isReferenced(_ tx: any SQLExecutor, blobKey: String) async throws -> Bool {
        try await tx.first("SELECT id FROM stickers WHERE image_key = ? OR thumbnail_key = ? LIMIT 1", [blobKey, blobKey]) != nil
    }

    /// Reserves one upload of `bytes` against the user's allowance; false when it would go over.
    func reserveUpload(_ tx: any SQLExecutor, userID: String, bytes: Int, maxStickers: Int, maxBytes: Int) async throws -> Bool {
        try await tx.query("INSERT INTO sticker_quotas (user_id, stickers, bytes) VALUES (?, 0, 0) ON CONFLICT (user_id) DO NOTHING", [userID])
        return
            !(try await tx.query(
                "UPDATE sticker_quotas SET stickers = stickers + 1, bytes = bytes + ? WHERE user_id = ? AND stickers < ? AND bytes + ? <= ? RETURNING user_id",
                [Int64(bytes), userID, Int64(maxStickers), Int64(bytes), Int64(maxBytes)]
            ).isEmpty)
    }

    /// Corrects a reservation by `bytes` (negative: the stored file is smaller than what was sent); false when a stored
    /// file larger than what was sent would take the allowance past `maxBytes` (nothing changed).
    func adjustUpload(_ tx: any SQLExecutor, userID: String, by bytes: Int, maxBytes: Int) async throws -> Bool {
        guard bytes != 0 else { return true }
        return try await !tx.query(
            "UPDATE sticker_quotas SET bytes = CASE WHEN bytes + ? < 0 THEN 0 ELSE bytes + ? END WHERE user_id = ? AND bytes + ? <= ? RETURNING user_id",
            [Int64(bytes), Int64(bytes), userID, Int64(bytes), Int64(maxBytes)]
        ).isEmpty
    }

    /// Gives back an upload's reservation (nothing was stored, or the sticker was deleted).
    func releaseUpload(_ tx: any SQLExecutor, userID: String, bytes: Int) async throws {
        try await tx.query(
            "UPDATE sticker_quotas SET stickers = stickers - 1, bytes = bytes - ? WHERE user_id = ? AND stickers > 0 AND bytes >= ?",
            [Int64(bytes), userID, Int64(bytes)])
    }

    /// Per pack: how many stickers and the first three thumbnails (for the pack listing).
    func summaries(_ tx: any SQLExecutor) async throws -> [String: (count: Int, previews: [String])] {
        let rows = try await tx.query(
            """
            SELECT pack_id, thumbnail_key, n FROM (
              SELECT pack_id, thumbnail_key, ROW_NUMBER() OVER (PARTITION BY pack_id ORDER BY sort_order, id) AS r,
                     COUNT(*) OVER (PARTITION BY pack_id) AS n
              FROM stickers WHERE owner_user_id IS NULL) ranked
            WHERE r <= 3 ORDER BY pack_id, r
            """, [])
        var result: [String: (count: Int, previews: [String])] = [:]
        for row in rows {
            let (pack, count, thumbnail) = (try row.string("pack_id"), Int(try row.int("n")), try row.string("thumbnail_key"))
            result[pack, default: (count, [])].previews.append(thumbnail)
        }
        return result
    }
}
