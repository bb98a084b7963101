import Foundation
import Storage

/// Subscription states (one record per user).
public enum SubscriptionStatus: String, Codable, Sendable, CaseIterable {
    case trialing, active, grace, pastDue = "past_due", canceled, expired
}

extension SubscriptionStatus {
    /// Whether a subscription in this state, with this period end, entitles its user to its plan at `now`.
    func entitles(periodEnd: Date, at now: Date) -> Bool {
        switch self {
        case .trialing, .active, .grace, .canceled: now < periodEnd
        case .pastDue, .expired: false
        }
    }
}

/// Who bills the subscription.
public enum SubscriptionProvider: String, Codable, Sendable {
    case apple, stripe, manual
}

/// A user's subscription record.
public struct Subscription: Sendable, Equatable {
    public let userID: String
    public let planID: String
    public let status: SubscriptionStatus
    public let provider: SubscriptionProvider
    public let currentPeriodStart: Date
    public let currentPeriodEnd: Date
    public let willRenew: Bool
    public let pendingPlanID: String?
    /// The provider's id for the subscription (Apple originalTransactionId, Stripe subscription id).
    public let providerSubscriptionID: String?
    /// Received through Apple Family Sharing (another family member pays): features, and tokens only when the plan says.
    public let familyShared: Bool

    /// Whether the plan's features apply at `now`: trialing, active, in grace, or canceled at period end,
    /// and the period has not ended. Past-due and expired subscriptions fall back to the free plan.
    public func isEntitled(at now: Date) -> Bool { status.entitles(periodEnd: currentPeriodEnd, at: now) }

    init(row: SQLRow) throws {
        userID = try row.string("user_id")
        planID = try row.string("plan_id")
        guard let status = SubscriptionStatus(rawValue: try row.string("status")),
            let provider = SubscriptionProvider(rawValue: try row.string("provider"))
        else { throw StorageError.decoding(column: "status") }
        self.status = status
        self.provider = provider
        currentPeriodStart = try row.date("current_period_start_ms")
        currentPeriodEnd = try row.date("current_period_end_ms")
        willRenew = try row.bool("will_renew")
        pendingPlanID = row.optionalString("pending_plan_id")
        providerSubscriptionID = row.optionalString("provider_subscription_id")
        // Reads that list their columns (the catalog version) leave it out: they need no more than the plan and status.
        familyShared = (try? row.bool("family_shared")) ?? false
    }
}

/// Reads and writes subscription records. The full provider state machine builds on these.
public struct SubscriptionStore: Sendable {
    public let catalog: PlanCatalog

    public init(catalog: PlanCatalog) { self.catalog = catalog }

    public func subscription(userID: String, _ tx: any SQLExecutor) async throws -> Subscription? {
        try await tx.first("SELECT * FROM subscriptions WHERE user_id = ?", [userID]).map(Subscription.init)
    }

    /// The plan whose features apply now: the subscribed plan while entitled, else the free plan.
    public func currentPlan(userID: String, now: Date, _ tx: any SQLExecutor) async throws -> SubscriptionPlan {
        plan(of: try await subscription(userID: userID, tx), now: now)
    }

    /// The plan `subscription` gives at `now` (the free plan when it does not entitle).
    func plan(of subscription: Subscription?, now: Date) -> SubscriptionPlan {
        guard let subscription, subscription.isEntitled(at: now), let plan = catalog.plan(id: subscription.planID) else { return catalog.freePlan }
        return plan
    }

    /// The subscription record, the plan that applies at `now`, and whether the record entitles the user to it.
    public func view(userID: String, now: Date, _ tx: any SQLExecutor) async throws -> SubscriptionView {
        let subscription = try await subscription(userID: userID, tx)
        let entitled = subscription?.isEntitled(at: now) ?? false
        let plan = entitled ? subscription.flatMap { catalog.plan(id: $0.planID) } ?? catalog.freePlan : catalog.freePlan
        return SubscriptionView(subscription: subscription, plan: plan, isEntitled: entitled)
    }

    /// An operator comp: the user is on `planID` from `now` until `periodEnd`, provider `manual`, not renewing.
    public func startManual(userID: String, planID: String, now: Date, periodEnd: Date, _ tx: any SQLExecutor) async throws -> Subscription {
        try await tx.query(
            """
            INSERT INTO subscriptions (user_id, plan_id, status, provider, current_period_start_ms, current_period_end_ms, will_renew, updated_at_ms)
            VALUES (?, ?, 'active', 'manual', ?, ?, ?, ?)
            ON CONFLICT (user_id) DO UPDATE SET plan_id = excluded.plan_id, status = 'active', provider = 'manual',
                current_period_start_ms = excluded.current_period_start_ms, current_period_end_ms = excluded.current_period_end_ms,
                will_renew = excluded.will_renew, pending_plan_id = NULL, provider_subscription_id = NULL, provider_customer_id = NULL,
                updated_at_ms = excluded.updated_at_ms, next_drip_at_ms = 0, family_shared = FALSE
            """, [userID, planID, now, periodEnd, false, now])
        guard let subscription = try await subscription(userID: userID, tx) else { throw StorageError.decoding(column: "user_id") }
        return subscription
    }

    /// Ends the subscription now (the user falls back to the free plan). Returns false when there was none.
    public func end(userID: String, now: Date, _ tx: any SQLExecutor) async throws -> Bool {
        let rows = try await tx.query(
            "UPDATE subscriptions SET status = 'expired', current_period_end_ms = ?, will_renew = ?, updated_at_ms = ? WHERE user_id = ? RETURNING user_id",
            [now, false, now, userID])
        return !rows.isEmpty
    }
}
