import Clock
import Events
import Foundation
import Ledger
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
        let before = try await lockedSubscription(userID: userID, tx)
        let subscription = try await store.startManual(userID: userID, planID: plan.id, now: now, periodEnd: end, tx)
        try await emitChange(tx, userID: userID, before: before, cause: "operator.comp", now: now)
        try await startPeriod(tx, userID: userID, plan: plan, start: subscription.currentPeriodStart)
        try await audit.record(tx, at: now, actor: actor, action: "admin_subscription_comp", subject: userID, ip: ip, detail: plan.id)
        return subscription
    }

    /// An operator ends the user's subscription now (back to the free plan), audited. False when there was none.
    public func end(_ tx: any SQLExecutor, userID: String, actor: String, ip: String?) async throws -> Bool {
        let now = clock.now()
        // An account without a subscription (or an id of none) has nothing to end, and no accounts are made for it.
        guard try await store.subscription(userID: userID, tx) != nil else { return false }
        let before = try await lockedSubscription(userID: userID, tx)
        guard try await store.end(userID: userID, now: now, tx) else { return false }
        try await emitChange(tx, userID: userID, before: before, cause: "operator.end", now: now)
        try await audit.record(tx, at: now, actor: actor, action: "admin_subscription_ended", subject: userID, ip: ip, detail: nil)
        return true
    }

    /// In an account's erasure transaction: its subscription ends now (no drip, no renewal credits it again; the event
    /// says so with cause `account.erased`).
    public func accountErased(_ tx: any SQLExecutor, userID: String, now: Date) async throws {
        let before = try await lockedSubscription(userID: userID, tx)
        guard try await store.end(userID: userID, now: now, tx) else { return }
        try await emitChange(tx, userID: userID, before: before, cause: "account.erased", now: now)
    }

    /// Yearly plans receive `monthlyTokens` each month of their period: month k of a period starts a ledger period keyed
    /// by (period start, k), which the ledger applies exactly once. Reads only subscriptions due (`next_drip_at_ms`, oldest
    /// first, `limit` at a time, up to `batches` batches while they come back full) and schedules each for its next month
    /// — or for never, when it is not a live yearly plan, until a write to it makes it due again. Returns how many months
    /// were started now.
    public func dripYearlyPlans(_ database: any Database, limit: Int, batches: Int = 1, logger: Logger) async throws -> Int {
        var started = 0
        for _ in 0..<max(1, batches) {
            let now = clock.now()
            let rows = try await database.withConnection(logger: logger) { tx in
                try await tx.query(
                    """
                    SELECT user_id, plan_id, status, current_period_start_ms, current_period_end_ms FROM subscriptions
                    WHERE next_drip_at_ms <= ? ORDER BY next_drip_at_ms LIMIT ?
                    """, [now, max(1, limit)])
            }
            var others: [String] = []
            for row in rows {
                let due = DripDue(
                    userID: try row.string("user_id"), planID: try row.string("plan_id"), status: try row.string("status"),
                    start: try row.date("current_period_start_ms"), end: try row.date("current_period_end_ms"))
                guard let plan = store.catalog.plan(id: due.planID), isLiveYearly(plan, status: due.status, end: due.end, now: now) else {
                    others.append(due.userID)
                    continue
                }
                if try await database.transaction(logger: logger, { tx in try await drip(tx, due, plan: plan, now: now) }) { started += 1 }
            }
            try await unschedule(database, others, now: now, logger: logger)
            if rows.count < max(1, limit) { break }
        }
        return started
    }

    static let liveStatuses: Set<String> = ["trialing", "active", "grace", "canceled"]

    private func isLiveYearly(_ plan: SubscriptionPlan, status: String, end: Date, now: Date) -> Bool {
        plan.interval == .year && Self.liveStatuses.contains(status) && end > now
    }

    /// What the drip read that is not a live yearly plan (most subscriptions: monthly plans) is scheduled for never, a
    /// few rows a transaction; each update checks again that the row still is not one (a write since the read left it due).
    private func unschedule(_ database: any Database, _ userIDs: [String], now: Date, logger: Logger) async throws {
        guard !userIDs.isEmpty else { return }
        let yearly = store.catalog.plans.filter { $0.interval == .year }.map(\.id)
        let statuses = Self.liveStatuses.sorted()
        let live =
            yearly.isEmpty
            ? "FALSE"
            : "(plan_id IN (\(Self.marks(yearly.count))) AND status IN (\(Self.marks(statuses.count))) AND current_period_end_ms > ?)"
        let liveBinds: [any SQLBindable] = yearly.isEmpty ? [] : yearly + statuses + [now as any SQLBindable]
        // 25 rows a transaction: a few milliseconds each, so no row stays locked long (500 in one held them for 1.8 s).
        for chunk in stride(from: 0, to: userIDs.count, by: 25).map({ userIDs[$0..<min($0 + 25, userIDs.count)] }) {
            try await database.transaction(logger: logger) { tx in
                for userID in chunk {
                    try await tx.query(
                        "UPDATE subscriptions SET next_drip_at_ms = NULL WHERE user_id = ? AND next_drip_at_ms <= ? AND NOT \(live)",
                        [userID, now] + liveBinds)
                }
            }
        }
    }

    private static func marks(_ count: Int) -> String { Array(repeating: "?", count: count).joined(separator: ", ") }

    /// One live yearly subscription the drip read: it is scheduled first, only if unchanged since it was read (a write in
    /// between made it due again, for the next pass); then this month of its period starts.
    private func drip(_ tx: any SQLExecutor, _ due: DripDue, plan: SubscriptionPlan, now: Date) async throws -> Bool {
        let calendar = Calendar(identifier: .gregorian)
        // A period that starts later (a provider's clock ahead of ours) is in its month 0, not month -1.
        let month = max(0, calendar.dateComponents([.month], from: due.start, to: now).month ?? 0)
        // The next month's start; an hour on when the calendar cannot say (or says now), so a row never spins.
        let following = calendar.date(byAdding: .month, value: month + 1, to: due.start) ?? now
        let next = following > now ? following : now.addingTimeInterval(3600)
        // The user's ledger locks first, as every subscription change takes them (``lockedSubscription(userID:_:)``).
        try await ledger.lockAccountsFirst(tx, userID: due.userID, creating: true)
        let unchanged = try await tx.query(
            """
            UPDATE subscriptions SET next_drip_at_ms = ? WHERE user_id = ? AND plan_id = ? AND status = ? AND current_period_start_ms = ?
            AND current_period_end_ms = ? AND next_drip_at_ms <= ? RETURNING user_id
            """, [next < due.end ? next : nil, due.userID, due.planID, due.status, due.start, due.end, now])
        guard !unchanged.isEmpty else { return false }
        return try await startPeriod(tx, userID: due.userID, plan: plan, start: due.start, month: month)
    }
}

/// A subscription as the drip read it.
private struct DripDue {
    let userID: String
    let planID: String
    let status: String
    let start: Date
    let end: Date
}
