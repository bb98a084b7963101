import Entitlements
import Foundation
import HTTPTypes
import Hummingbird
import Ledger

struct BalancesJSON: Codable, Sendable, Equatable {
    let bonusTokens: Int64
    let subscriptionTokens: Int64
    let purchasedTokens: Int64
    let heldTokens: Int64
    let totalTokens: Int64

    init(_ b: BucketBalances) {
        bonusTokens = b.bonusTokens
        subscriptionTokens = b.subscriptionTokens
        purchasedTokens = b.purchasedTokens
        heldTokens = b.heldTokens
        totalTokens = b.totalTokens
    }
}

struct LedgerResultJSON: Codable, Sendable {
    let operationId: String
    let userId: String
    let amount: Int64
    let balances: BalancesJSON

    init(_ r: LedgerResult) {
        operationId = r.operationId
        userId = r.userId
        amount = r.amount
        balances = BalancesJSON(r.balances)
    }
}

struct HoldJSON: Codable, Sendable {
    let id: String
    let userId: String
    let status: String
    let amount: Int64
    let capturedAmount: Int64?
    let expiresAt: String
    let resolvedAt: String?

    init(_ h: HoldState) {
        id = h.id
        userId = h.userId
        status = h.status
        amount = h.amount
        capturedAmount = h.capturedAmount
        expiresAt = ISODate.string(h.expiresAt)
        resolvedAt = h.resolvedAt.map(ISODate.string)
    }
}

/// The seed's `TokenBalance` plus `bonusTokens` and `heldTokens`.
struct TokenBalanceJSON: Encodable, Sendable {
    let subscriptionTokens: Int64
    let purchasedTokens: Int64
    let totalTokens: Int64
    let lastSubscriptionRefresh: String?
    let maxRollover: Int
    let currentPlan: SubscriptionPlan?
    let bonusTokens: Int64
    let heldTokens: Int64

    init(_ view: TokenBalanceView) {
        subscriptionTokens = view.balances.subscriptionTokens
        purchasedTokens = view.balances.purchasedTokens
        totalTokens = view.balances.totalTokens
        lastSubscriptionRefresh = view.lastSubscriptionRefresh.map(ISODate.string)
        maxRollover = view.plan.maxRollover
        currentPlan = view.plan
        bonusTokens = view.balances.bonusTokens
        heldTokens = view.balances.heldTokens
    }
}

/// A page of the token history, newest first.
struct HistoryJSON: Encodable, Sendable {
    struct Entry: Encodable, Sendable {
        let id: String; let amount: Int64; let bucket: String?; let reason: String; let createdAt: String; let balanceAfter: Int64?;
        let metadata: JSONValue?
    }
    let entries: [Entry]
    let nextCursor: String?

    init(_ page: (entries: [HistoryEntry], nextCursor: Int64?)) {
        entries = page.entries.map {
            Entry(
                id: $0.id, amount: $0.amount, bucket: $0.bucket, reason: $0.reason, createdAt: ISODate.string($0.createdAt),
                balanceAfter: $0.balanceAfter,
                metadata: JSONValue.parse($0.metadata))
        }
        nextCursor = page.nextCursor.map(String.init)
    }

    /// `limit` (1…100, default 50) and `cursor` (a `nextCursor`) from the query string.
    static func page(_ request: Request) throws -> (limit: Int, cursor: Int64?) {
        let limit =
            try request.uri.queryParameters["limit"].map { raw -> Int in
                guard let n = Int(String(raw)), (1...LedgerLimits.historyPageMax).contains(n) else {
                    throw Problem.validation("limit must be from 1 to \(LedgerLimits.historyPageMax).")
                }
                return n
            } ?? 50
        let cursor = try request.uri.queryParameters["cursor"].map { raw -> Int64 in
            guard let n = Int64(String(raw)), n > 0 else { throw Problem.validation("cursor must be a value returned as nextCursor.") }
            return n
        }
        return (limit, cursor)
    }
}

/// `POST /api/ledger/grants`; operators' grants are compared as one for idempotency.
struct LedgerGrantRequest: Codable {
    let userId: String; let amount: Int64; let bucket: Bucket; let reason: String?; let expiresAt: String?; let metadata: JSONValue?
}

/// `POST /api/entitlements/reserve`'s answer: the hold, what it is for and the balances after it.
struct ReservationJSON: Encodable, Sendable {
    /// The hold to capture or void; for an ask to buy, left out until the owner approves (`purchase_request.resolved`).
    let holdId: String?
    let userId: String
    let tokens: Int64
    let expiresAt: String
    let action: String?
    let quantity: Int?
    let attributes: [String: String]?
    let description: String?
    let balances: BalancesJSON
    let purchaseRequest: PurchaseRequestJSON?

    init(_ r: Reservation) {
        (userId, tokens, expiresAt) = (r.hold.userId, r.hold.amount, ISODate.string(r.hold.expiresAt))
        holdId = r.purchaseRequest == nil ? r.hold.id : nil
        (action, quantity, attributes, description) = (r.quote?.action, r.quote?.quantity, r.quote?.attributes, r.quote?.description)
        balances = BalancesJSON(r.balances)
        purchaseRequest = r.purchaseRequest.map(PurchaseRequestJSON.init)
    }

    /// 202 for an ask to buy (the owner decides), else 201.
    static func status(_ r: Reservation) -> HTTPResponse.Status { r.purchaseRequest == nil ? .created : .accepted }
}
