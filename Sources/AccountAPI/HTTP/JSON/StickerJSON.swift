import Clock
import Entitlements
import Foundation
import Media
import Storage

extension MediaServices {
    /// The `StickerJSON` of a sticker: its files' URLs signed when `signed`, public otherwise.
    func json(_ sticker: Sticker, signed: Bool, now: Date? = nil) -> StickerJSON {
        let now = now ?? clock.now()
        let url = { (key: String) in signed ? signer.signedURL(key, now: now) : signer.publicURL(key) }
        return StickerJSON(
            id: sticker.id, packId: sticker.packID, name: sticker.name, imageUrl: url(sticker.file.imageKey),
            thumbnailUrl: url(sticker.file.thumbnailKey),
            width: sticker.file.width, height: sticker.file.height, fileType: sticker.file.fileType, tags: sticker.tags,
            isAnimated: sticker.file.isAnimated, sortOrder: sticker.sortOrder, usageCount: sticker.usageCount)
    }

    func json(_ list: StickerList) -> [StickerJSON] {
        let now = clock.now()
        return list.stickers.map { json($0, signed: list.signed.contains($0.id), now: now) }
    }
}

/// A sticker as apps get it (seed 000's `CustomSticker`, camelCase).
struct StickerJSON: Encodable, Sendable {
    let id: String; let packId: String; let name: String; let imageUrl: String; let thumbnailUrl: String; let width: Int; let height: Int
    let fileType: String; let tags: [String]; let isAnimated: Bool; let sortOrder: Int; let usageCount: Int
}
