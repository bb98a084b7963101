import Clock
import Events
import Foundation
import Logging
import Storage

/// The double-entry token ledger. Every operation runs inside the caller's transaction (so it composes with
/// verification, pack unlocks or billing events) and first locks the user's bucket accounts in a fixed order
/// (`Ledger+posting.swift`). Holds have their own file (`Holds.swift`), idempotent writes theirs (`Idempotency.swift`).
public struct Ledger: Sendable {
    let clock: any TimeSource
    /// Where the ledger records its events (`tokens.*`, `hold.*`, `refund.clawed_back`), in the operation's transaction.
    let events: any EventSink

    public init(clock: any TimeSource, events: any EventSink = NoEvents()) {
        self.clock = clock
        self.events = events
    }

    static let issuance = "system:issuance"
    static let consumption = "system:consumption"
    static let expired = "system:expired"
    static let clawback = "system:clawback"
    static let holds = "system:holds"

    static func accountID(_ userID: String, _ bucket: Bucket) -> String { "user:\(userID):\(bucket.rawValue)" }

    /// The ``RowLanes`` key of a user's ledger accounts: every operation that locks them runs in it (a service's spends,
    /// holds, grants, a check-and-reserve, a pack unlock), so one account's parallel requests hold a few connections,
    /// not the pool.
    public static func lane(userID: String) -> String { RowLanes.user(userID) }
    /// A capture or void names only its hold: the lane is its user's, or the hold's own when there is no such hold.
    func lane(holdID: String, _ executor: any SQLExecutor) async throws -> String {
        try await holdState(executor, id: holdID).map { Self.lane(userID: $0.userId) } ?? "hold:" + holdID
    }

    // MARK: - Operations

    /// Credits `amountTokens` to a bucket from issuance. Bonus grants may expire. Callers that take a user id from
    /// outside check it first (``LedgerService``).
    public func grant(
        _ tx: any SQLExecutor, userID: String, amountTokens: Int64, bucket: Bucket, reason: String, expiresAt: Date? = nil, metadata: String? = nil,
        idempotencyKey: String? = nil
    ) async throws -> LedgerResult {
        try Self.check(amountTokens: amountTokens, reason: reason, metadata: metadata)
        if expiresAt != nil && bucket != .bonus { throw LedgerError.invalid("Only bonus grants can expire.") }
        let now = clock.now()
        if let expiresAt, expiresAt <= now { throw LedgerError.invalid("expiresAt must be in the future.") }
        var state = try await prepare(tx, userID: userID, now: now)
        let operation = Self.newID()
        try await post(
            tx, &state, from: Self.issuance, to: Self.accountID(userID, bucket), amount: amountTokens, reason: reason,
            userDelta: (bucket, amountTokens), operation: operation, metadata: metadata, now: now)
        if bucket == .bonus {
            try await tx.query(
                "INSERT INTO ledger_lots (id, user_id, granted, remaining, expires_at_ms, created_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
                [Self.newID(), userID, amountTokens, amountTokens, expiresAt, now])
        }
        try await emit(
            tx, .tokensGranted, state, change: amountTokens, now: now,
            [
                "operationId": .string(operation), "amount": .int(amountTokens), "bucket": .string(bucket.rawValue), "reason": .string(reason),
                "expiresAt": .date(expiresAt), "idempotencyKey": .optional(idempotencyKey),
                "metadata": metadata.map(EventValue.rawJSON) ?? .null,
            ])
        return LedgerResult(operationId: operation, userId: userID, amount: amountTokens, balances: state.balances)
    }

    /// Spends at once, soonest-expiring tokens first. Not enough → `insufficientTokens` (nothing written).
    /// With an `attribution`, the spend counts on the profile's allowance and is refused past it.
    public func spend(
        _ tx: any SQLExecutor, userID: String, amountTokens: Int64, reason: String, metadata: String? = nil, idempotencyKey: String? = nil,
        attribution: Attribution? = nil
    ) async throws -> LedgerResult {
        try Self.check(amountTokens: amountTokens, reason: reason, metadata: metadata)
        let now = clock.now()
        var state = try await prepare(tx, userID: userID, now: now)
        if let attribution { try await charge(tx, attribution, userID: userID, held: 0, used: amountTokens) }
        let parts = try await allocate(tx, state: state, userID: userID, amountTokens: amountTokens, now: now)
        let operation = Self.newID()
        for part in parts {
            try await post(
                tx, &state, from: Self.accountID(userID, part.bucket), to: Self.consumption, amount: part.amount, reason: reason,
                userDelta: (part.bucket, -part.amount), operation: operation, metadata: metadata, now: now)
            if let lot = part.lotID { try await tx.query("UPDATE ledger_lots SET remaining = remaining - ? WHERE id = ?", [part.amount, lot]) }
        }
        if let attribution { try await recordSpend(tx, attribution, userID: userID, operationID: operation, amount: amountTokens, now: now) }
        LedgerMetrics.spend(path: "transactional")
        try await emit(
            tx, .tokensSpent, state, change: -amountTokens, now: now,
            [
                "operationId": .string(operation), "amount": .int(amountTokens), "reason": .string(reason),
                "idempotencyKey": .optional(idempotencyKey),
                "metadata": metadata.map(EventValue.rawJSON) ?? .null,
            ])
        return LedgerResult(operationId: operation, userId: userID, amount: amountTokens, balances: state.balances)
    }

    /// Balances now (after releasing the user's expired holds and lapsed lots).
    public func balances(_ tx: any SQLExecutor, userID: String) async throws -> BucketBalances {
        try await prepare(tx, userID: userID, now: clock.now()).balances
    }

    /// Purchased tokens the user has not used: the purchased bucket. What pending holds reserved from it counts as used:
    /// a hold is a spend under way, and Billing answers Apple's refund questions from this figure (oldest purchase first),
    /// so a pack held whole while Apple asked was reported as untouched and refunded in full, then captured.
    public func purchasedUnspent(_ tx: any SQLExecutor, userID: String) async throws -> Int64 {
        try await balances(tx, userID: userID).purchasedTokens
    }

    /// Newest first, at most `limit` (≤ 100), before the `cursor` returned by the previous page.
    public func history(
        _ tx: any SQLExecutor, userID: String, limit: Int, cursor: Int64?
    ) async throws -> (entries: [HistoryEntry], nextCursor: Int64?) {
        let pageSize = min(max(limit, 1), LedgerLimits.historyPageMax)
        let rows = try await tx.query(
            """
            SELECT seq, id, user_amount, user_bucket, reason, created_at_ms, user_balance_after, metadata FROM ledger_transfers
            WHERE user_id = ? AND user_amount <> 0 AND seq < ? ORDER BY seq DESC LIMIT ?
            """, [userID, cursor ?? Int64.max, pageSize + 1])
        let entries = try rows.prefix(pageSize).map { row in
            HistoryEntry(
                id: try row.string("id"), amount: try row.int("user_amount"), bucket: row.optionalString("user_bucket"),
                reason: try row.string("reason"),
                createdAt: try row.date("created_at_ms"), balanceAfter: row.optionalInt("user_balance_after"),
                metadata: row.optionalString("metadata"),
                seq: try row.int("seq"))
        }
        return (entries, rows.count > pageSize ? entries.last?.seq : nil)
    }

    /// Starts a subscription period exactly once per (user, `periodKey`): subscription tokens above
    /// `maxRolloverTokens` expire, then `monthlyTokens` are granted. Returns false when already done.
    public func startPeriod(
        _ tx: any SQLExecutor, userID: String, periodKey: String, planID: String, monthlyTokens: Int64, maxRolloverTokens: Int64,
        topUp: Bool = false
    ) async throws -> Bool {
        let now = clock.now()
        var state = try await prepare(tx, userID: userID, now: now)
        let claimed = try await tx.query(
            """
            INSERT INTO ledger_period_grants (user_id, period_key, plan_id, granted, expired, created_at_ms) VALUES (?, ?, ?, 0, 0, ?)
            ON CONFLICT (user_id, period_key) DO NOTHING RETURNING user_id
            """, [userID, periodKey, planID, now])
        guard !claimed.isEmpty else {
            guard topUp else { return false }
            return try await topUpPeriod(tx, &state, periodKey: periodKey, planID: planID, monthlyTokens: monthlyTokens, now: now)
        }
        let operation = Self.newID()
        let excess = state.balances[.subscription] - max(0, maxRolloverTokens)
        if excess > 0 {
            try await post(
                tx, &state, from: Self.accountID(userID, .subscription), to: Self.expired, amount: excess, reason: "rollover_expiry",
                userDelta: (.subscription, -excess), operation: operation, metadata: nil, now: now)
        }
        if monthlyTokens > 0 {
            try await post(
                tx, &state, from: Self.issuance, to: Self.accountID(userID, .subscription), amount: monthlyTokens,
                reason: "subscription_period", userDelta: (.subscription, monthlyTokens), operation: operation, metadata: nil, now: now)
        }
        try await tx.query(
            "UPDATE ledger_period_grants SET granted = ?, expired = ? WHERE user_id = ? AND period_key = ?",
            [monthlyTokens, max(0, excess), userID, periodKey])
        if monthlyTokens > 0 || excess > 0 {
            try await emit(
                tx, .tokensGranted, state, change: monthlyTokens - max(0, excess), now: now,
                [
                    "operationId": .string(operation), "amount": .int(monthlyTokens), "bucket": .string(Bucket.subscription.rawValue),
                    "reason": .string("subscription_period"), "planId": .string(planID), "periodKey": .string(periodKey),
                    "expiredTokens": .int(max(0, excess)),
                ])
        }
        return true
    }

    /// A period already granted, now on a plan with more tokens a month (an upgrade within the period): grants the
    /// difference once, so the period holds what the bigger plan grants and never more. A change to a smaller plan, or
    /// back and forth, grants nothing: a plan switch is never a way to a new month of tokens.
    func topUpPeriod(
        _ tx: any SQLExecutor, _ state: inout UserState, periodKey: String, planID: String, monthlyTokens: Int64, now: Date
    ) async throws -> Bool {
        let row = try await tx.first(
            "SELECT granted, refund FROM ledger_period_grants WHERE user_id = ? AND period_key = ?" + tx.dialect.forUpdate, [state.userID, periodKey])
        let granted = try row?.int("granted") ?? monthlyTokens
        // A refunded period is settled: a plan change tops it up no more.
        guard monthlyTokens > granted, try row?.string("refund") == "none" || row?.string("refund") == "reversed" else { return false }
        let difference = monthlyTokens - granted
        let operation = Self.newID()
        try await post(
            tx, &state, from: Self.issuance, to: Self.accountID(state.userID, .subscription), amount: difference, reason: "subscription_period",
            userDelta: (.subscription, difference), operation: operation, metadata: nil, now: now)
        try await tx.query(
            "UPDATE ledger_period_grants SET granted = ?, plan_id = ? WHERE user_id = ? AND period_key = ?",
            [monthlyTokens, planID, state.userID, periodKey])
        try await emit(
            tx, .tokensGranted, state, change: difference, now: now,
            [
                "operationId": .string(operation), "amount": .int(difference), "bucket": .string(Bucket.subscription.rawValue),
                "reason": .string("subscription_period"), "planId": .string(planID), "periodKey": .string(periodKey), "topUp": .bool(true),
            ])
        return true
    }

    /// When the user's subscription tokens were last granted.
    public func lastSubscriptionRefresh(_ tx: any SQLExecutor, userID: String) async throws -> Date? {
        try await tx.first("SELECT MAX(created_at_ms) AS at FROM ledger_period_grants WHERE user_id = ?", [userID])?.optionalDate("at")
    }

    /// What a period grant gave, for clawbacks.
    public func periodGrant(_ tx: any SQLExecutor, userID: String, periodKey: String) async throws -> Int64? {
        try await tx.first("SELECT granted FROM ledger_period_grants WHERE user_id = ? AND period_key = ?", [userID, periodKey])?.optionalInt(
            "granted")
    }

    /// A paid period's months: its key and the keys of its later months (`months`, a SQL `LIKE` pattern; a yearly plan
    /// is granted a month at a time).
    public struct PeriodMonths: Sendable {
        public let key: String
        public let months: String
        public init(key: String, months: String) {
            self.key = key
            self.months = months
        }
    }

    /// A refund of a paid period: takes back what its months granted, never below zero, once. `dispute`: the dispute
    /// whose withdrawal this is (its reinstatement gives back only what it took). Nil when the period's refund was
    /// recorded before, or reversed (a reversal may arrive first): then nothing changes. A period not granted yet (its
    /// refund arrived first) is recorded as `refunded_early` with nothing taken, so its grant, arriving later, grants
    /// nothing (``startPeriod``, ``isRefunded``) until the refund is reversed.
    public func refundPeriod(
        _ tx: any SQLExecutor, userID: String, period: PeriodMonths, planID: String, dispute: String? = nil
    ) async throws -> (clawed: Int64, shortfall: Int64)? {
        try await lockAccountsFirst(tx, userID: userID)
        let months = try await periodMonths(tx, userID: userID, period)
        guard months.allSatisfy({ $0.refund == "none" }) else { return nil }
        guard !months.isEmpty else {
            try await tx.query(
                """
                INSERT INTO ledger_period_grants (user_id, period_key, plan_id, granted, expired, created_at_ms, refund, refunded_by)
                VALUES (?, ?, ?, 0, 0, ?, 'refunded_early', ?)
                """, [userID, period.key, planID, clock.now(), dispute])
            return (0, 0)
        }
        let granted = months.reduce(Int64(0)) { $0 + $1.granted }
        var taken: (clawed: Int64, shortfall: Int64) = (0, 0)
        if granted > 0 {
            let result = try await clawback(tx, userID: userID, amountTokens: granted, bucket: .subscription, reason: "refund_clawback")
            taken = (result.clawedTokens, result.shortfallTokens)
        }
        // What was taken, month by month (a reversal gives back exactly this).
        var left = taken.clawed
        for month in months {
            let share = min(left, month.granted)
            left -= share
            try await tx.query(
                "UPDATE ledger_period_grants SET refund = 'refunded', clawed = ?, refunded_by = ? WHERE user_id = ? AND period_key = ?",
                [share, dispute, userID, month.key])
        }
        return taken
    }

    /// What reversing a period's refund did.
    public enum PeriodRestore: Sendable, Equatable {
        /// The refund's clawback was given back.
        case restored(Int64)
        /// Not refunded (yet): marked reversed, so its refund, arriving late, takes nothing.
        case markedReversed
        /// Reversed before, or no such period, or (a dispute) not taken by that dispute: nothing changed.
        case unchanged
    }

    /// A reversed refund of a period: gives back what its refund took, once; a period granted but not refunded yet is
    /// marked reversed, so its refund, arriving late, takes nothing. A refund that came before the grant is forgotten,
    /// so the grant, if it comes now, grants. `dispute`: a won dispute, which gives back only what its own withdrawal
    /// took, and leaves the period as if never refunded (a refund may still take it).
    public func restorePeriod(_ tx: any SQLExecutor, userID: String, period: PeriodMonths, dispute: String? = nil) async throws -> PeriodRestore {
        try await lockAccountsFirst(tx, userID: userID)
        let months = try await periodMonths(tx, userID: userID, period)
        if let dispute {
            let taken = months.filter { $0.refund != "none" && $0.refund != "reversed" && $0.refundedBy == dispute }
            guard !taken.isEmpty else { return .unchanged }
            try await dropRefundFirstPlaceholder(tx, userID: userID, period)
            for month in taken where month.refund == "refunded" {
                try await tx.query(
                    "UPDATE ledger_period_grants SET refund = 'none', clawed = 0, refunded_by = NULL WHERE user_id = ? AND period_key = ?",
                    [userID, month.key])
            }
            return .restored(try await giveBack(tx, userID: userID, taken.reduce(Int64(0)) { $0 + $1.clawed }))
        }
        try await dropRefundFirstPlaceholder(tx, userID: userID, period)
        let refunded = months.filter { $0.refund == "refunded" || $0.refund == "refunded_early" }
        for month in months where month.refund == "none" || month.refund == "refunded" {
            try await tx.query("UPDATE ledger_period_grants SET refund = 'reversed' WHERE user_id = ? AND period_key = ?", [userID, month.key])
        }
        guard !refunded.isEmpty else { return months.contains { $0.refund == "none" } ? .markedReversed : .unchanged }
        return .restored(try await giveBack(tx, userID: userID, refunded.reduce(Int64(0)) { $0 + $1.clawed }))
    }

    /// A reversal undoes the row a refund that came before its period wrote (``refundPeriod``), so the period grants again.
    private func dropRefundFirstPlaceholder(_ tx: any SQLExecutor, userID: String, _ period: PeriodMonths) async throws {
        try await tx.query(
            "DELETE FROM ledger_period_grants WHERE user_id = ? AND period_key = ? AND refund = 'refunded_early'", [userID, period.key])
    }

    private func giveBack(_ tx: any SQLExecutor, userID: String, _ tokens: Int64) async throws -> Int64 {
        if tokens > 0 { _ = try await grant(tx, userID: userID, amountTokens: tokens, bucket: .subscription, reason: "refund_reversed") }
        return tokens
    }

    /// Whether the period starting under `periodKey` stands refunded (its refund may have arrived before its grant).
    public func isRefunded(_ tx: any SQLExecutor, userID: String, periodKey: String) async throws -> Bool {
        let refund = try await tx.first("SELECT refund FROM ledger_period_grants WHERE user_id = ? AND period_key = ?", [userID, periodKey])?
            .string("refund")
        return refund == "refunded" || refund == "refunded_early"
    }

    /// The recorded months of a period, locked.
    private func periodMonths(
        _ tx: any SQLExecutor, userID: String, _ period: PeriodMonths
    ) async throws -> [(key: String, granted: Int64, refund: String, clawed: Int64, refundedBy: String?)] {
        try await tx.query(
            """
            SELECT period_key, granted, refund, clawed, refunded_by FROM ledger_period_grants WHERE user_id = ? AND (period_key = ? OR period_key LIKE ?)
            ORDER BY period_key
            """ + tx.dialect.forUpdate, [userID, period.key, period.months]
        ).map {
            (try $0.string("period_key"), try $0.int("granted"), try $0.string("refund"), try $0.int("clawed"), $0.optionalString("refunded_by"))
        }
    }

    /// Takes back up to `amountTokens` from a bucket into the clawback account, never below zero. Returns what
    /// was taken and the shortfall (already spent), so callers can record it.
    public func clawback(
        _ tx: any SQLExecutor, userID: String, amountTokens: Int64, bucket: Bucket, reason: String
    ) async throws
        -> (clawedTokens: Int64, shortfallTokens: Int64)
    {
        try Self.check(amountTokens: amountTokens, reason: reason, metadata: nil)
        let now = clock.now()
        var state = try await prepare(tx, userID: userID, now: now)
        let take = min(amountTokens, state.balances[bucket])
        if take > 0 {
            if bucket == .bonus { try await takeFromLots(tx, userID: userID, amountTokens: take) }
            try await post(
                tx, &state, from: Self.accountID(userID, bucket), to: Self.clawback, amount: take, reason: reason,
                userDelta: (bucket, -take), operation: Self.newID(), metadata: nil, now: now)
        }
        try await emit(
            tx, .refundClawedBack, state, change: -take, now: now,
            [
                "amount": .int(amountTokens), "clawedTokens": .int(take), "shortfallTokens": .int(amountTokens - take),
                "bucket": .string(bucket.rawValue),
                "reason": .string(reason),
            ])
        return (take, amountTokens - take)
    }

    /// Bonus tokens live in lots: a clawback takes from the latest-expiring lots first (the ones a user would spend last).
    func takeFromLots(_ tx: any SQLExecutor, userID: String, amountTokens: Int64) async throws {
        var left = amountTokens
        let lots = try await tx.query(
            "SELECT id, remaining FROM ledger_lots WHERE user_id = ? AND remaining > 0 ORDER BY CASE WHEN expires_at_ms IS NULL THEN 0 ELSE 1 END, expires_at_ms DESC, id",
            [userID])
        for lot in lots where left > 0 {
            let take = min(left, try lot.int("remaining"))
            try await tx.query("UPDATE ledger_lots SET remaining = remaining - ? WHERE id = ?", [take, try lot.string("id")])
            left -= take
        }
    }
}
