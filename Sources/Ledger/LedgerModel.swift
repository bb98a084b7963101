import Foundation
import Storage

/// A user's token buckets, in spend order: bonus (soonest-expiring lots first), then subscription, then purchased.
public enum Bucket: String, Codable, Sendable, CaseIterable {
    case bonus, subscription, purchased
}

/// Ledger failures. Each is checked before anything is written.
public enum LedgerError: Error, Equatable, Sendable {
    case insufficientTokens(availableTokens: Int64)
    case holdNotFound
    /// The hold already resolved (or expired); carries its final state.
    case holdResolved(HoldState)
    case invalid(String)
    /// No live user has this id (unknown, or erased).
    case userNotFound(String)
    /// The idempotency key was used with another request; these fields differ.
    case idempotencyConflict(fields: [String])
    /// No transfer (history entry) with this id.
    case transferNotFound
    /// The operation was reversed before (by this reversal operation).
    case alreadyReversed(reversalOperationID: String)
    /// This kind of operation cannot be reversed (the detail says what to do instead).
    case notReversible(String)
    /// The profile's allowance for the period would be passed; `remaining` is what it may still use.
    case allowanceExceeded(allowance: Int64, remaining: Int64)
    /// The hold belongs to a purchase request the account's owner has not answered: only the answer resolves it.
    case holdAwaitingApproval
}

/// What a user can spend now, per bucket, plus what pending holds reserve.
public struct BucketBalances: Sendable, Equatable, Codable {
    public var bonusTokens: Int64
    public var subscriptionTokens: Int64
    public var purchasedTokens: Int64
    public var heldTokens: Int64

    public init(bonusTokens: Int64, subscriptionTokens: Int64, purchasedTokens: Int64, heldTokens: Int64) {
        self.bonusTokens = bonusTokens
        self.subscriptionTokens = subscriptionTokens
        self.purchasedTokens = purchasedTokens
        self.heldTokens = heldTokens
    }
    /// Spendable now (holds already excluded).
    public var totalTokens: Int64 { bonusTokens + subscriptionTokens + purchasedTokens }

    public static let zero = BucketBalances(bonusTokens: 0, subscriptionTokens: 0, purchasedTokens: 0, heldTokens: 0)

    subscript(bucket: Bucket) -> Int64 {
        get {
            switch bucket {
            case .bonus: bonusTokens
            case .subscription: subscriptionTokens
            case .purchased: purchasedTokens
            }
        }
        set {
            switch bucket {
            case .bonus: bonusTokens = newValue
            case .subscription: subscriptionTokens = newValue
            case .purchased: purchasedTokens = newValue
            }
        }
    }
}

/// A hold's state as the API shows it.
public struct HoldState: Sendable, Equatable, Codable {
    public let id: String
    public let userId: String
    public let status: String
    public let amount: Int64
    public let capturedAmount: Int64?
    public let expiresAt: Date
    public let resolvedAt: Date?

    init(row: SQLRow) throws {
        id = try row.string("id")
        userId = try row.string("user_id")
        status = try row.string("status")
        amount = try row.int("amount")
        capturedAmount = row.optionalInt("captured_amount")
        expiresAt = try row.date("expires_at_ms")
        resolvedAt = row.optionalDate("resolved_at_ms")
    }
}

/// The result of a grant or spend: what happened and the balances after it.
public struct LedgerResult: Sendable, Equatable, Codable {
    public let operationId: String
    public let userId: String
    public let amount: Int64
    public let balances: BucketBalances

    public init(operationId: String, userId: String, amount: Int64, balances: BucketBalances) {
        self.operationId = operationId
        self.userId = userId
        self.amount = amount
        self.balances = balances
    }
}

/// One row of a user's token history (newest first).
public struct HistoryEntry: Sendable, Equatable, Codable {
    public let id: String
    public let amount: Int64
    public let bucket: String?
    public let reason: String
    public let createdAt: Date
    public let balanceAfter: Int64?
    public let metadata: String?
    let seq: Int64
}

/// What `ledger verify` found.
public struct VerifyReport: Sendable, Codable, Equatable {
    public let ok: Bool
    public let accountsChecked: Int
    public let transfersChecked: Int
    public let differences: [String]
}

/// Limits of the ledger's inputs.
public enum LedgerLimits {
    public static let amountTokensMax: Int64 = 1_000_000_000
    public static let holdTTLSecondsDefault = 600
    public static let holdTTLSecondsMax = 86_400
    public static let metadataBytesMax = 4096
    public static let reasonLengthMax = 64
    public static let historyPageMax = 100
}
