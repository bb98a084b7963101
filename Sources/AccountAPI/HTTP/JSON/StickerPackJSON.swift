import Entitlements
import Ledger

/// A pack as apps see it: the seed's `StickerPack` plus `isPremium` and `tokenPrice`.
struct StickerPackJSON: Encodable, Sendable {
    let id: String; let name: String; let description: String?; let iconUrl: String?; let category: String; let stickerCount: Int64
    let isLocked: Bool; let previewStickers: [String]; let isPremium: Bool; let tokenPrice: Int64

    init(_ view: PackView) {
        let p = view.pack
        id = p.id
        name = p.name
        description = p.description
        iconUrl = p.iconUrl
        category = p.category
        stickerCount = p.stickerCount
        isLocked = view.isLocked
        previewStickers = p.previewStickers
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
