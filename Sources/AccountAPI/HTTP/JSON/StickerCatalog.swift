import Entitlements
import Foundation

/// `GET /api/stickers/catalog`: the packs a user can use as an editor SDK's sticker categories (seed 003), each with
/// `identifier`, `title`, `thumbnailUrl` and its stickers (`identifier`, `imageUrl`, `thumbnailUrl`), one to one with
/// the SDK's category and sticker assets; the user's own uploads are the last category, `custom`.
enum StickerCatalog {
    struct Item: Encodable { let identifier: String; let title: String; let imageUrl: String; let thumbnailUrl: String; let isAnimated: Bool }
    struct Category: Encodable { let identifier: String; let title: String; let thumbnailUrl: String?; let stickers: [Item] }
    struct Body: Encodable { let categories: [Category] }

    static func render(packs: [StickerPack], list: StickerList, media: MediaServices) throws -> Data {
        let json = media.json(list)
        let byPack = Dictionary(grouping: json, by: \.packId)
        var categories = packs.compactMap { pack -> Category? in
            guard let stickers = byPack[pack.id], !stickers.isEmpty else { return nil }
            return Category(
                identifier: pack.id, title: pack.name, thumbnailUrl: pack.iconUrl ?? stickers.first?.thumbnailUrl, stickers: stickers.map(item))
        }
        if let own = byPack[Sticker.customPackID], !own.isEmpty {
            categories.append(
                Category(identifier: Sticker.customPackID, title: "My stickers", thumbnailUrl: own.first?.thumbnailUrl, stickers: own.map(item)))
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(Body(categories: categories))
    }

    static func item(_ sticker: StickerJSON) -> Item {
        Item(
            identifier: sticker.id, title: sticker.name, imageUrl: sticker.imageUrl, thumbnailUrl: sticker.thumbnailUrl,
            isAnimated: sticker.isAnimated)
    }
}
