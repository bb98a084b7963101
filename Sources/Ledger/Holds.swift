import Clock
import Foundation
import Logging
import Storage

/// The hold rules: a hold moves tokens into the holds account at once; it resolves exactly once: captured (up to its
/// amount posted to consumption, the rest returned), voided (all returned) or expired (``HoldRules``, `HoldExpiry.swift`).
extension Ledger {
    /// Reserves tokens at once (moved into the holds account) until captured, voided or expired.
    /// With an `attribution`, the hold counts on the profile's allowance (``charge(_:_:userID:held:used:)``) until it resolves.
    public func hold(
        _ tx: any SQLExecutor, userID: String, amountTokens: Int64, ttlSeconds: Int, reason: String, metadata: String? = nil,
        idempotencyKey: String? = nil, attribution: Attribution? = nil, ttlSecondsMax: Int = LedgerLimits.holdTTLSecondsMax,
        awaitingApproval: Bool = false
    ) async throws -> HoldState {
        try await holdWithBalances(
            tx, userID: userID, amountTokens: amountTokens, ttlSeconds: ttlSeconds, reason: reason, metadata: metadata,
            idempotencyKey: idempotencyKey, attribution: attribution, ttlSecondsMax: ttlSecondsMax, awaitingApproval: awaitingApproval
        ).hold
    }

    /// ``hold(_:userID:amountTokens:ttlSeconds:reason:metadata:idempotencyKey:attribution:ttlSecondsMax:)`` and the user's
    /// balances after it (no second read).
    public func holdWithBalances(
        _ tx: any SQLExecutor, userID: String, amountTokens: Int64, ttlSeconds: Int, reason: String, metadata: String? = nil,
        idempotencyKey: String? = nil, attribution: Attribution? = nil, ttlSecondsMax: Int = LedgerLimits.holdTTLSecondsMax,
        awaitingApproval: Bool = false
    ) async throws -> (hold: HoldState, balances: BucketBalances) {
        try Self.check(amountTokens: amountTokens, reason: reason, metadata: metadata)
        guard (1...ttlSecondsMax).contains(ttlSeconds) else {
            throw LedgerError.invalid("ttlSeconds must be from 1 to \(ttlSecondsMax).")
        }
        let now = clock.now()
        var state = try await prepare(tx, userID: userID, now: now)
        if let attribution { try await charge(tx, attribution, userID: userID, held: amountTokens, used: 0) }
        let parts = try await allocate(tx, state: state, userID: userID, amountTokens: amountTokens, now: now)
        let holdID = Self.newID()
        state.balances.heldTokens += amountTokens
        try await tx.query(
            """
            INSERT INTO ledger_holds (id, user_id, amount, status, reason, metadata, expires_at_ms, created_at_ms, profile_id, usage_period_ms,
                                      awaiting_approval)
            VALUES (?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?)
            """,
            [
                holdID, userID, amountTokens, reason, metadata, now.addingTimeInterval(Double(ttlSeconds)), now, attribution?.profileID,
                attribution?.periodStart, awaitingApproval,
            ])
        for (index, part) in parts.enumerated() {
            try await post(
                tx, &state, from: Self.accountID(userID, part.bucket), to: Self.holds, amount: part.amount, reason: "hold",
                userDelta: (part.bucket, -part.amount), operation: holdID, metadata: metadata, now: now, holdID: holdID)
            if let lot = part.lotID { try await tx.query("UPDATE ledger_lots SET remaining = remaining - ? WHERE id = ?", [part.amount, lot]) }
            try await tx.query(
                "INSERT INTO ledger_hold_parts (hold_id, part, bucket, lot_id, amount) VALUES (?, ?, ?, ?, ?)",
                [holdID, index, part.bucket.rawValue, part.lotID, part.amount])
        }
        let hold = try await writtenHold(tx, id: holdID)
        try await emitHold(tx, .holdCreated, hold, state, change: -amountTokens, key: idempotencyKey, now: now)
        return (hold, state.balances)
    }

    /// Posts up to the held amount (default all) to consumption and returns the rest. Resolves once. A hold awaiting its
    /// owner's approval is resolved only `byApprover` (the purchase request's answer).
    public func capture(
        _ tx: any SQLExecutor, holdID: String, amountTokens: Int64? = nil, idempotencyKey: String? = nil, byApprover: Bool = false
    ) async throws -> HoldState {
        let (hold, now, state) = try await pendingHold(tx, holdID: holdID, byApprover: byApprover)
        let captured = amountTokens ?? hold.amount
        guard captured >= 1, captured <= hold.amount else { throw LedgerError.invalid("amount must be from 1 to the held \(hold.amount).") }
        var remaining = captured
        var userState = state
        for part in try await holdParts(tx, holdID: holdID) {
            let take = min(remaining, part.amount)
            remaining -= take
            if take > 0 {
                try await post(
                    tx, &userState, from: Self.holds, to: Self.consumption, amount: take, reason: "capture",
                    userDelta: nil, userID: hold.userId, operation: holdID, metadata: nil, now: now, holdID: holdID)
            }
            if part.amount - take > 0 {
                try await release(
                    tx, &userState, part: part, amount: part.amount - take, userID: hold.userId, holdID: holdID, reason: "release", now: now)
            }
        }
        let resolved = try await tx.first(
            "UPDATE ledger_holds SET status = 'captured', captured_amount = ?, resolved_at_ms = ? WHERE id = ? RETURNING \(Self.usageColumns)",
            [captured, now, holdID])
        try await settleUsage(tx, hold: resolved, captured: captured)
        let final = try await writtenHold(tx, id: holdID)
        try await emitHold(tx, .holdCaptured, final, userState, change: hold.amount - captured, key: idempotencyKey, now: now)
        return final
    }

    /// What ``settleUsage(_:hold:captured:)`` reads of a resolved hold.
    static let usageColumns = "profile_id, usage_period_ms, amount"

    /// Returns everything a pending hold reserved. Resolves once; a hold awaiting approval only `byApprover`.
    public func void(_ tx: any SQLExecutor, holdID: String, idempotencyKey: String? = nil, byApprover: Bool = false) async throws -> HoldState {
        let (hold, now, state) = try await pendingHold(tx, holdID: holdID, byApprover: byApprover)
        var userState = state
        try await releaseAll(tx, &userState, holdID: holdID, status: "voided", reason: "void", now: now)
        let resolved = try await writtenHold(tx, id: holdID)
        try await emitHold(tx, .holdVoided, resolved, userState, change: hold.amount, key: idempotencyKey, now: now)
        return resolved
    }

    /// How many holds are pending (the `ledger_holds_pending` gauge).
    public func pendingHoldCount(_ tx: any SQLExecutor) async throws -> Int64 {
        try await tx.first("SELECT COUNT(*) AS n FROM ledger_holds WHERE status = 'pending'")?.optionalInt("n") ?? 0
    }

    /// Reads a hold, locks its user's accounts first (fixed lock order), then checks it is still pending.
    func pendingHold(_ tx: any SQLExecutor, holdID: String, byApprover: Bool = false) async throws -> (HoldState, Date, UserState) {
        guard let unlocked = try await holdState(tx, id: holdID) else { throw LedgerError.holdNotFound }
        let now = clock.now()
        let state = try await prepare(tx, userID: unlocked.userId, now: now)  // releases it if it expired
        guard let row = try await tx.first("SELECT * FROM ledger_holds WHERE id = ?" + tx.dialect.forUpdate, [holdID]) else {
            throw LedgerError.holdNotFound
        }
        let hold = try HoldState(row: row)
        guard hold.status == "pending" else { throw LedgerError.holdResolved(hold) }
        if !byApprover, try row.bool("awaiting_approval") { throw LedgerError.holdAwaitingApproval }
        return (hold, now, state)
    }

    /// The owner approved the purchase request behind a hold: it is the caller's to capture or void from now on, for at
    /// least `minimumSeconds` more (an approval late in the request's life still leaves time to do the work).
    public func approveHold(_ tx: any SQLExecutor, holdID: String, minimumSeconds: Int) async throws {
        let until = clock.now().addingTimeInterval(Double(minimumSeconds))
        try await tx.query(
            """
            UPDATE ledger_holds SET awaiting_approval = ?, expires_at_ms = CASE WHEN expires_at_ms < ? THEN ? ELSE expires_at_ms END
            WHERE id = ? AND status = 'pending'
            """, [false, until, until, holdID])
    }

    func holdState(_ tx: any SQLExecutor, id: String) async throws -> HoldState? {
        try await tx.first("SELECT * FROM ledger_holds WHERE id = ?", [id]).map(HoldState.init)
    }

    /// A hold this transaction has just written (missing only if the database lost it: the transaction fails, nothing traps).
    func writtenHold(_ tx: any SQLExecutor, id: String) async throws -> HoldState {
        guard let hold = try await holdState(tx, id: id) else { throw LedgerError.holdNotFound }
        return hold
    }

    func holdParts(_ tx: any SQLExecutor, holdID: String) async throws -> [Part] {
        try await tx.query("SELECT bucket, lot_id, amount FROM ledger_hold_parts WHERE hold_id = ? ORDER BY part", [holdID]).map { row in
            Part(bucket: Bucket(rawValue: try row.string("bucket")) ?? .purchased, lotID: row.optionalString("lot_id"), amount: try row.int("amount"))
        }
    }

    func releaseAll(_ tx: any SQLExecutor, _ state: inout UserState, holdID: String, status: String, reason: String, now: Date) async throws {
        for part in try await holdParts(tx, holdID: holdID) {
            try await release(tx, &state, part: part, amount: part.amount, userID: state.userID, holdID: holdID, reason: reason, now: now)
        }
        let resolved = try await tx.first(
            "UPDATE ledger_holds SET status = ?, captured_amount = 0, resolved_at_ms = ? WHERE id = ? RETURNING \(Self.usageColumns)",
            [status, now, holdID])
        try await settleUsage(tx, hold: resolved, captured: 0)
    }

    /// Returns held tokens to the bucket (and bonus lot) they came from. An already lapsed lot expires them
    /// at the next access.
    func release(
        _ tx: any SQLExecutor, _ state: inout UserState, part: Part, amount: Int64, userID: String, holdID: String, reason: String, now: Date
    )
        async throws
    {
        try await post(
            tx, &state, from: Self.holds, to: Self.accountID(userID, part.bucket), amount: amount, reason: reason,
            userDelta: (part.bucket, amount), operation: holdID, metadata: nil, now: now, holdID: holdID)
        if let lot = part.lotID { try await tx.query("UPDATE ledger_lots SET remaining = remaining + ? WHERE id = ?", [amount, lot]) }
    }
}
