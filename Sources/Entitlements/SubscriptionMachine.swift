import Foundation
import Ledger
import Storage

/// What a billing provider (or an operator) says happened to a subscription.
public enum SubscriptionEvent: Sendable, Equatable {
    /// A new subscription (or a resubscribe). `trial` periods last the plan's `trialDays` unless `periodEnd` says otherwise.
    case start(planID: String, periodStart: Date, periodEnd: Date?, trial: Bool, willRenew: Bool)
    /// A new billing period; a pending downgrade takes effect, or `planID` when the provider names the plan.
    case renew(periodStart: Date, periodEnd: Date, planID: String? = nil)
    /// An upgrade that applies at once: a new period on the new plan starts now.
    case changePlanNow(planID: String, periodEnd: Date?, periodStart: Date? = nil)
    /// A downgrade (or crossgrade) at the next renewal.
    case changePlanAtRenewal(planID: String)
    /// Auto-renew turned off (access continues to the period end) or back on.
    case setWillRenew(Bool)
    /// Billing failed; access continues until `until`.
    case grace(until: Date)
    /// Billing failed with no grace period: back to the free plan until paid.
    case pastDue
    /// The subscription ended.
    case expire
    /// The purchase was refunded or revoked: access ends now and the period's tokens are clawed back.
    case refund
    /// A refund was reversed: access and the clawed-back tokens return.
    case reverseRefund

    var kind: String {
        switch self {
        case .start: "start"
        case .renew: "renew"
        case .changePlanNow: "change_plan_now"
        case .changePlanAtRenewal: "change_plan_at_renewal"
        case .setWillRenew: "set_will_renew"
        case .grace: "grace"
        case .pastDue: "past_due"
        case .expire: "expire"
        case .refund: "refund"
        case .reverseRefund: "reverse_refund"
        }
    }
}

/// The outcome of applying an event.
public enum EventOutcome: String, Sendable, Equatable {
    case applied
    /// The same provider event id was applied before: nothing happened again.
    case duplicate
    /// Older than the newest applied event: recorded, not applied.
    case stale
    /// Makes no sense in the current state (e.g. renew with no subscription): recorded, not applied.
    case ignored
}

/// The one entry point that changes subscriptions. Each event applies once per (provider, event id), in one
/// transaction with its token effects (periods through the ledger's exactly-once rollover path).
public struct SubscriptionMachine: Sendable {
    let store: SubscriptionStore
    let ledger: Ledger
    let clock: any TimeSource

    public init(store: SubscriptionStore, ledger: Ledger, clock: any TimeSource) {
        self.store = store
        self.ledger = ledger
        self.clock = clock
    }

    public func apply(
        _ tx: any SQLExecutor, provider: SubscriptionProvider, eventID: String, userID: String, occurredAt: Date, event: SubscriptionEvent
    ) async throws -> EventOutcome {
        let now = clock.now()
        let claimed = try await tx.query(
            """
            INSERT INTO subscription_events (provider, event_id, user_id, kind, occurred_at_ms, outcome, recorded_at_ms) VALUES (?, ?, ?, ?, ?, 'pending', ?)
            ON CONFLICT (provider, event_id) DO NOTHING RETURNING event_id
            """, [provider.rawValue, eventID, userID, event.kind, occurredAt, now])
        guard !claimed.isEmpty else { return .duplicate }
        let current = try await store.subscription(userID: userID, tx)
        let lastEvent = try await tx.first("SELECT last_event_at_ms FROM subscriptions WHERE user_id = ?", [userID])?.optionalDate("last_event_at_ms")
        var outcome = EventOutcome.applied
        var detail: String?
        if let lastEvent, occurredAt < lastEvent {
            outcome = .stale
            // A paid period is a fact even when it arrives after a newer event: its tokens are granted (once, by
            // period key), but the newer state (plan flags, status) is kept.
            if case .renew(let start, _, let planID) = event, let current, start > current.currentPeriodStart,
                let plan = store.catalog.plan(id: planID ?? current.pendingPlanID ?? current.planID), !plan.isFreeTier
            {
                try await startPeriod(tx, userID: userID, plan: plan, start: start)
                detail = "late period: tokens granted, newer state kept"
            }
        } else {
            (outcome, detail) = try await transition(tx, provider: provider, userID: userID, current: current, event: event, at: occurredAt)
            if outcome == .applied {
                try await tx.query("UPDATE subscriptions SET last_event_at_ms = ?, updated_at_ms = ? WHERE user_id = ?", [occurredAt, now, userID])
            }
        }
        try await tx.query(
            "UPDATE subscription_events SET outcome = ?, detail = ? WHERE provider = ? AND event_id = ?", [outcome.rawValue, detail, provider.rawValue, eventID])
        return outcome
    }

    func transition(
        _ tx: any SQLExecutor, provider: SubscriptionProvider, userID: String, current: Subscription?, event: SubscriptionEvent, at: Date
    ) async throws -> (EventOutcome, String?) {
        switch event {
        case .start(let planID, let start, let end, let trial, let willRenew):
            let plan = try requirePlan(planID)
            let periodEnd = end ?? Self.defaultEnd(start: start, plan: plan, trial: trial)
            try await upsert(tx, userID: userID, planID: plan.id, status: trial ? .trialing : .active, provider: provider, start: start, end: periodEnd,
                             willRenew: willRenew, pending: nil)
            try await startPeriod(tx, userID: userID, plan: plan, start: start)
            return (.applied, nil)
        case .renew(let start, let end, let planID):
            guard let current else { return (.ignored, "no subscription to renew") }
            let plan = try requirePlan(planID ?? current.pendingPlanID ?? current.planID)
            try await upsert(tx, userID: userID, planID: plan.id, status: .active, provider: provider, start: start, end: end, willRenew: true, pending: nil)
            try await startPeriod(tx, userID: userID, plan: plan, start: start)
            return (.applied, nil)
        case .changePlanNow(let planID, let end, let start):
            guard let current else { return (.ignored, "no subscription to change") }
            let plan = try requirePlan(planID)
            let start = start ?? at
            try await upsert(tx, userID: userID, planID: plan.id, status: .active, provider: provider, start: start, end: end ?? current.currentPeriodEnd,
                             willRenew: current.willRenew, pending: nil)
            try await startPeriod(tx, userID: userID, plan: plan, start: start)
            return (.applied, nil)
        case .changePlanAtRenewal(let planID):
            guard let current else { return (.ignored, "no subscription to change") }
            _ = try requirePlan(planID)
            // Renewing into the current plan cancels a pending change.
            try await tx.query("UPDATE subscriptions SET pending_plan_id = ? WHERE user_id = ?", [planID == current.planID ? nil : planID, userID])
            return (.applied, nil)
        case .setWillRenew(let renew):
            guard current != nil else { return (.ignored, "no subscription") }
            try await tx.query("UPDATE subscriptions SET will_renew = ? WHERE user_id = ?", [renew, userID])
            return (.applied, nil)
        case .grace(let until):
            guard current != nil else { return (.ignored, "no subscription") }
            try await tx.query("UPDATE subscriptions SET status = 'grace', current_period_end_ms = ? WHERE user_id = ?", [until, userID])
            return (.applied, nil)
        case .pastDue:
            guard current != nil else { return (.ignored, "no subscription") }
            try await tx.query("UPDATE subscriptions SET status = 'past_due' WHERE user_id = ?", [userID])
            return (.applied, nil)
        case .expire:
            guard current != nil else { return (.ignored, "no subscription") }
            try await tx.query("UPDATE subscriptions SET status = 'expired', will_renew = ? WHERE user_id = ?", [false, userID])
            return (.applied, nil)
        case .refund:
            guard let current else { return (.ignored, "no subscription") }
            let granted = try await ledger.periodGrant(tx, userID: userID, periodKey: Self.periodKey(current.currentPeriodStart)) ?? 0
            var detail = "clawed 0"
            if granted > 0 {
                let (clawed, shortfall) = try await ledger.clawback(tx, userID: userID, amountTokens: granted, bucket: .subscription, reason: "refund_clawback")
                detail = "clawed \(clawed) shortfall \(shortfall)"
            }
            try await tx.query("UPDATE subscriptions SET status = 'expired', will_renew = ?, current_period_end_ms = ? WHERE user_id = ?", [false, at, userID])
            return (.applied, detail)
        case .reverseRefund:
            guard current != nil else { return (.ignored, "no subscription") }
            let last = try await tx.first(
                "SELECT detail FROM subscription_events WHERE user_id = ? AND kind = 'refund' AND outcome = 'applied' ORDER BY occurred_at_ms DESC LIMIT 1",
                [userID])?.optionalString("detail")
            let clawed = Int64(last?.split(separator: " ").dropFirst().first ?? "0") ?? 0
            if clawed > 0 {
                _ = try await ledger.grant(tx, userID: userID, amountTokens: clawed, bucket: .subscription, reason: "refund_reversed")
            }
            let end = Calendar(identifier: .gregorian).date(byAdding: .month, value: 1, to: current!.currentPeriodStart) ?? at
            try await tx.query("UPDATE subscriptions SET status = 'active', current_period_end_ms = ? WHERE user_id = ?", [max(end, at), userID])
            return (.applied, "restored \(clawed)")
        }
    }

    func requirePlan(_ id: String) throws -> SubscriptionPlan {
        guard let plan = store.catalog.plan(id: id), !plan.isFreeTier else { throw EntitlementError.invalid(["unknown or free plan '\(id)'"]) }
        return plan
    }

    func upsert(
        _ tx: any SQLExecutor, userID: String, planID: String, status: SubscriptionStatus, provider: SubscriptionProvider, start: Date, end: Date,
        willRenew: Bool, pending: String?
    ) async throws {
        try await tx.query(
            """
            INSERT INTO subscriptions (user_id, plan_id, status, provider, current_period_start_ms, current_period_end_ms, will_renew, pending_plan_id, updated_at_ms)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (user_id) DO UPDATE SET plan_id = excluded.plan_id, status = excluded.status, provider = excluded.provider,
                current_period_start_ms = excluded.current_period_start_ms, current_period_end_ms = excluded.current_period_end_ms,
                will_renew = excluded.will_renew, pending_plan_id = excluded.pending_plan_id, updated_at_ms = excluded.updated_at_ms
            """, [userID, planID, status.rawValue, provider.rawValue, start, end, willRenew, pending, clock.now()])
    }

    /// Rollover then the plan's monthly tokens, once per period (the key every path uses: comps, drips, events).
    func startPeriod(_ tx: any SQLExecutor, userID: String, plan: SubscriptionPlan, start: Date) async throws {
        _ = try await ledger.startPeriod(
            tx, userID: userID, periodKey: Self.periodKey(start), planID: plan.id, monthlyTokens: Int64(plan.monthlyTokens),
            maxRolloverTokens: Int64(plan.maxRollover))
    }

    public static func periodKey(_ start: Date) -> String { "period:\(start.epochMilliseconds)" }

    static func defaultEnd(start: Date, plan: SubscriptionPlan, trial: Bool) -> Date {
        let calendar = Calendar(identifier: .gregorian)
        if trial && plan.trialDays > 0 { return calendar.date(byAdding: .day, value: plan.trialDays, to: start)! }
        return calendar.date(byAdding: plan.id.hasSuffix("_yearly") ? .year : .month, value: 1, to: start)!
    }
}
