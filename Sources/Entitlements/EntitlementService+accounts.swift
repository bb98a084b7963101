import Clock
import Foundation
import Ledger
import Logging
import Storage

/// A user's subscription as apps and operators see it: the record (nil: never subscribed), the plan whose features
/// apply now, and whether the record entitles the user to its plan now.
public struct SubscriptionView: Sendable, Equatable {
    public let subscription: Subscription?
    public let plan: SubscriptionPlan
    public let isEntitled: Bool
}

/// A user's tokens as the app's `TokenBalance` shows them.
public struct TokenBalanceView: Sendable, Equatable {
    public let balances: BucketBalances
    public let lastSubscriptionRefresh: Date?
    public let plan: SubscriptionPlan
}

extension EntitlementService {
    public func subscriptionView(userID: String, logger: Logger) async throws -> SubscriptionView {
        try await database.withConnection(logger: logger) { tx in try await subscriptions.view(userID: userID, now: clock.now(), tx) }
    }

    /// Balances now (expired holds and lapsed lots settled first, in the same transaction), the plan and the last grant.
    public func tokenBalance(userID: String, logger: Logger) async throws -> TokenBalanceView {
        // The balance releases expired holds first, so it locks the user's ledger rows: it runs in their lane.
        try await database.transaction(lane: Ledger.lane(userID: userID), logger: logger) { tx in
            TokenBalanceView(
                balances: try await ledger.balances(tx, userID: userID),
                lastSubscriptionRefresh: try await ledger.lastSubscriptionRefresh(tx, userID: userID),
                plan: try await subscriptions.currentPlan(userID: userID, now: clock.now(), tx))
        }
    }
}
