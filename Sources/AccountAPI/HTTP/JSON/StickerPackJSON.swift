import Entitlements
import Ledger

/// A pack as apps see it: the seed's `StickerPack` plus `isPremium` and `tokenPrice`.
struct StickerPackJSON: Encodable, Sendable {
    let id: String; let name: String; let description: String?; let iconUrl: String?; let category: String; let stickerCount: Int64
    let isLocked: Bool; let previewStickers: [String]; let isPremium: Bool; let tokenPrice: Int64

    /// `summary`: the pack's stickers, when it has any (their count and the public URLs of the first three thumbnails
    /// replace the operator-written `stickerCount` and `previewStickers`).
    init(_ view: PackView, summary: (count: Int, previews: [String])? = nil) {
        let p = view.pack
        id = p.id
        name = p.name
        description = p.description
        iconUrl = p.iconUrl
        category = p.category
        stickerCount = summary.map { Int64($0.count) } ?? p.stickerCount
        isLocked = view.isLocked
        previewStickers = summary?.previews ?? p.previewStickers
        isPremium = p.isPremium
        tokenPrice = p.tokenPrice
    }
}

/// What `POST /api/stickers/packs/{id}/unlock` answers.
struct UnlockJSON: Codable, Sendable {
    let packId: String
    let unlocked: Bool
    let tokensSpent: Int64
    let balances: BalancesJSON?

    init(_ result: UnlockResult) {
        packId = result.packID
        unlocked = true
        tokensSpent = result.spent?.amount ?? 0
        balances = result.spent.map { BalancesJSON($0.balances) }
    }
}
