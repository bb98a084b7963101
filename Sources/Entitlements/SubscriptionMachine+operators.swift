import Foundation
import Logging
import Storage

/// What operators and the background sweeper do to subscriptions, through the same machine as provider events.
extension SubscriptionMachine {
    /// An operator's comp: the user is on `planID` (an active paid plan) from now until `periodEnd` (default: one
    /// month), provider `manual`, not renewing. The comp starts a period (rollover, then the plan's monthly tokens, once)
    /// and is audited, all in the caller's transaction.
    public func comp(_ tx: any SQLExecutor, userID: String, planID: String, periodEnd: Date?, actor: String, ip: String?) async throws -> Subscription
    {
        guard let plan = store.catalog.plan(id: planID), plan.isActive, !plan.isFreeTier else {
            throw EntitlementError.invalid(["planId must be an active paid plan id from GET /api/subscription-plans"])
        }
        let now = clock.now()
        if let periodEnd, periodEnd <= now { throw EntitlementError.invalid(["periodEnd must be in the future"]) }
        let end = periodEnd ?? Calendar(identifier: .gregorian).date(byAdding: .month, value: 1, to: now) ?? now.addingTimeInterval(30 * 86400)
        let before = try await store.subscription(userID: userID, tx)
        let subscription = try await store.startManual(userID: userID, planID: plan.id, now: now, periodEnd: end, tx)
        try await emitChange(tx, userID: userID, before: before, cause: "operator.comp", now: now)
        try await startPeriod(tx, userID: userID, plan: plan, start: subscription.currentPeriodStart)
        try await audit.record(tx, at: now, actor: actor, action: "admin_subscription_comp", subject: userID, ip: ip, detail: plan.id)
        return subscription
    }

    /// An operator ends the user's subscription now (back to the free plan), audited. False when there was none.
    public func end(_ tx: any SQLExecutor, userID: String, actor: String, ip: String?) async throws -> Bool {
        let now = clock.now()
        let before = try await store.subscription(userID: userID, tx)
        guard try await store.end(userID: userID, now: now, tx) else { return false }
        try await emitChange(tx, userID: userID, before: before, cause: "operator.end", now: now)
        try await audit.record(tx, at: now, actor: actor, action: "admin_subscription_ended", subject: userID, ip: ip, detail: nil)
        return true
    }

    /// Yearly plans receive `monthlyTokens` each month of their period: month k of a period starts a ledger period keyed
    /// by (period start, k), which the ledger applies exactly once. At most `limit` subscriptions a pass; returns how many
    /// months were started now.
    public func dripYearlyPlans(_ database: any Database, limit: Int, logger: Logger) async throws -> Int {
        let now = clock.now()
        let rows = try await database.withConnection(logger: logger) { tx in
            try await tx.query(
                """
                SELECT user_id, plan_id, current_period_start_ms FROM subscriptions
                WHERE status IN ('trialing', 'active', 'grace', 'canceled') AND current_period_end_ms > ? LIMIT ?
                """, [now, max(1, limit)])
        }
        var started = 0
        for row in rows {
            guard let plan = store.catalog.plan(id: try row.string("plan_id")), plan.interval == .year else { continue }
            let start = try row.date("current_period_start_ms")
            let month = Calendar(identifier: .gregorian).dateComponents([.month], from: start, to: now).month ?? 0
            let userID = try row.string("user_id")
            let done = try await database.transaction(logger: logger) { tx in
                try await startPeriod(tx, userID: userID, plan: plan, start: start, month: month)
            }
            if done { started += 1 }
        }
        return started
    }
}
