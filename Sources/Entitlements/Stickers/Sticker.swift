import Foundation
import Storage

/// One sticker of a pack. Its files are blob-store keys; URLs are made per request (signed for premium packs).
public struct Sticker: Sendable, Equatable {
    public let id: String
    public let packID: String
    public let name: String
    /// The stored files and what the image is.
    public let file: StoredImage
    public let tags: [String]
    public let sortOrder: Int
    public let usageCount: Int

    static let columns =
        "id, pack_id, name, image_key, thumbnail_key, file_type, width, height, is_animated, tags, sort_order, usage_count"

    init(row: SQLRow) throws {
        id = try row.string("id")
        packID = try row.string("pack_id")
        name = try row.string("name")
        file = StoredImage(
            imageKey: try row.string("image_key"), thumbnailKey: try row.string("thumbnail_key"), fileType: try row.string("file_type"),
            width: Int(try row.int("width")), height: Int(try row.int("height")), isAnimated: try row.bool("is_animated"))
        tags = (try? JSONDecoder().decode([String].self, from: Data(try row.string("tags").utf8))) ?? []
        sortOrder = Int(try row.int("sort_order"))
        usageCount = Int(try row.int("usage_count"))
    }

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
        return String(slug.prefix(48)).isEmpty ? "sticker" : String(slug.prefix(48))
    }
}

/// The rows of `stickers` (owned by Entitlements with the packs).
struct StickerStore: Sendable {
    func stickers(_ tx: any SQLExecutor, packID: String) async throws -> [Sticker] {
        try await tx.query(
            "SELECT \(Sticker.columns) FROM stickers WHERE pack_id = ? ORDER BY sort_order, id LIMIT 1000", [packID]
        ).map(Sticker.init)
    }

    func insert(
        _ tx: any SQLExecutor, id: String, packID: String, name: String, stored: StoredImage, tags: [String], now: Date
    ) async throws -> Bool {
        let tagsJSON = String(decoding: try JSONEncoder().encode(tags), as: UTF8.self)
        let order =
            try await tx.first("SELECT COALESCE(MAX(sort_order), 0) + 1 AS n FROM stickers WHERE pack_id = ?", [packID])?.optionalInt("n") ?? 1
        return
            !(try await tx.query(
                """
                INSERT INTO stickers (id, pack_id, name, image_key, thumbnail_key, file_type, width, height, is_animated, tags, sort_order, created_at_ms)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING RETURNING id
                """,
                [
                    id, packID, name, stored.imageKey, stored.thumbnailKey, stored.fileType, Int64(stored.width), Int64(stored.height),
                    stored.isAnimated,
                    tagsJSON,
                    order, now,
                ]
            ).isEmpty)
    }

    /// Which pack a file belongs to and whether it is a preview (one of the pack's first three thumbnails).
    func owner(_ tx: any SQLExecutor, blobKey: String) async throws -> (packID: String, isPreview: Bool)? {
        guard
            let row = try await tx.first(
                "SELECT pack_id, thumbnail_key = ? AS is_thumbnail FROM stickers WHERE image_key = ? OR thumbnail_key = ? LIMIT 1",
                [blobKey, blobKey, blobKey])
        else {
            return nil
        }
        let packID = try row.string("pack_id")
        guard try row.bool("is_thumbnail") else { return (packID, false) }
        let previews = try await tx.query("SELECT thumbnail_key FROM stickers WHERE pack_id = ? ORDER BY sort_order, id LIMIT 3", [packID])
        return (packID, try previews.contains { try $0.string("thumbnail_key") == blobKey })
    }
}
