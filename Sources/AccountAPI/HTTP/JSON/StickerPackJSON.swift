import Entitlements
import HTTPTypes
import Ledger

/// A pack as apps see it: the seed's `StickerPack` plus `isPremium` and `tokenPrice`.
struct StickerPackJSON: Encodable, Sendable {
    let id: String; let name: String; let description: String?; let iconUrl: String?; let category: String; let stickerCount: Int64
    let isLocked: Bool; let previewStickers: [String]; let isPremium: Bool; let tokenPrice: Int64; let contentRating: String

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
        contentRating = p.contentRating.rawValue
    }
}

/// What `POST /api/stickers/packs/{id}/unlock` answers.
struct UnlockJSON: Encodable, Sendable {
    let packId: String
    let unlocked: Bool
    let tokensSpent: Int64
    let balances: BalancesJSON?
    /// Ask to buy: the pending request the owner approves (nothing is unlocked yet).
    let purchaseRequest: PurchaseRequestJSON?

    init(_ result: UnlockResult) {
        packId = result.packID
        unlocked = result.purchaseRequest == nil
        tokensSpent = result.spent?.amount ?? 0
        balances = result.spent.map { BalancesJSON($0.balances) }
        purchaseRequest = result.purchaseRequest.map(PurchaseRequestJSON.init)
    }

    /// 202 for a purchase request (accepted for the owner to decide), else 200.
    static func status(_ result: UnlockResult) -> HTTPResponse.Status { result.purchaseRequest == nil ? .ok : .accepted }
}

/// A purchase request as the owner and the asking profile see it.
struct PurchaseRequestJSON: Encodable, Sendable {
    let id: String
    let profileId: String
    /// The pack asked for; for a service's ask to buy, `action` and `description` instead.
    let packId: String?
    let action: String?
    let description: String?
    let tokens: Int64
    let status: String
    let createdAt: String
    let expiresAt: String
    let resolvedAt: String?

    init(_ r: PurchaseRequest) {
        (id, profileId, packId, tokens, status) = (r.id, r.profileId, r.packId, r.tokens, r.status)
        (action, description) = (r.action, r.description)
        (createdAt, expiresAt, resolvedAt) = (ISODate.string(r.createdAt), ISODate.string(r.expiresAt), r.resolvedAt.map(ISODate.string))
    }
}
