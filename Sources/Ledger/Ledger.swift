import Foundation
import Synchronization
import Logging
import CoreMetrics
import Metrics
import Storage

/// The double-entry token ledger. Every operation runs inside the caller's transaction (so it composes with
/// verification, pack unlocks or billing events) and first locks the user's bucket accounts in a fixed order.
public struct Ledger: Sendable {
    let clock: any TimeSource

    public init(clock: any TimeSource) { self.clock = clock }

    static let issuance = "system:issuance"
    static let consumption = "system:consumption"
    static let expired = "system:expired"
    static let clawback = "system:clawback"
    static let holds = "system:holds"

    static func accountID(_ userID: String, _ bucket: Bucket) -> String { "user:\(userID):\(bucket.rawValue)" }

    // MARK: - Operations

    /// Credits `amountTokens` to a bucket from issuance. Bonus grants may expire.
    public func grant(
        _ tx: any SQLExecutor, userID: String, amountTokens: Int64, bucket: Bucket, reason: String, expiresAt: Date? = nil, metadata: String? = nil
    ) async throws -> LedgerResult {
        try Self.check(amountTokens: amountTokens, reason: reason, metadata: metadata)
        if expiresAt != nil && bucket != .bonus { throw LedgerError.invalid("Only bonus grants can expire.") }
        let now = clock.now()
        if let expiresAt, expiresAt <= now { throw LedgerError.invalid("expiresAt must be in the future.") }
        var state = try await prepare(tx, userID: userID, now: now)
        let operation = Self.newID()
        try await post(tx, &state, from: Self.issuance, to: Self.accountID(userID, bucket), amount: amountTokens, reason: reason,
                       userDelta: (bucket, amountTokens), operation: operation, metadata: metadata, now: now)
        if bucket == .bonus {
            try await tx.query(
                "INSERT INTO ledger_lots (id, user_id, granted, remaining, expires_at_ms, created_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
                [Self.newID(), userID, amountTokens, amountTokens, expiresAt, now])
        }
        return LedgerResult(operationId: operation, userId: userID, amount: amountTokens, balances: try await balances(tx, state: state, now: now))
    }

    /// Spends at once, soonest-expiring tokens first. Not enough → `insufficientTokens` (nothing written).
    public func spend(_ tx: any SQLExecutor, userID: String, amountTokens: Int64, reason: String, metadata: String? = nil) async throws -> LedgerResult {
        try Self.check(amountTokens: amountTokens, reason: reason, metadata: metadata)
        let now = clock.now()
        var state = try await prepare(tx, userID: userID, now: now)
        let parts = try await allocate(tx, state: state, userID: userID, amountTokens: amountTokens, now: now)
        let operation = Self.newID()
        for part in parts {
            try await post(tx, &state, from: Self.accountID(userID, part.bucket), to: Self.consumption, amount: part.amount, reason: reason,
                           userDelta: (part.bucket, -part.amount), operation: operation, metadata: metadata, now: now)
            if let lot = part.lotID { try await tx.query("UPDATE ledger_lots SET remaining = remaining - ? WHERE id = ?", [part.amount, lot]) }
        }
        LedgerMetrics.spend(path: "transactional")
        return LedgerResult(operationId: operation, userId: userID, amount: amountTokens, balances: try await balances(tx, state: state, now: now))
    }

    /// Reserves tokens at once (moved into the holds account) until captured, voided or expired.
    public func hold(
        _ tx: any SQLExecutor, userID: String, amountTokens: Int64, ttlSeconds: Int, reason: String, metadata: String? = nil
    ) async throws -> HoldState {
        try Self.check(amountTokens: amountTokens, reason: reason, metadata: metadata)
        guard (1...LedgerLimits.holdTTLSecondsMax).contains(ttlSeconds) else {
            throw LedgerError.invalid("ttlSeconds must be from 1 to \(LedgerLimits.holdTTLSecondsMax).")
        }
        let now = clock.now()
        var state = try await prepare(tx, userID: userID, now: now)
        let parts = try await allocate(tx, state: state, userID: userID, amountTokens: amountTokens, now: now)
        let holdID = Self.newID()
        state.balances.heldTokens += amountTokens
        try await tx.query(
            "INSERT INTO ledger_holds (id, user_id, amount, status, reason, metadata, expires_at_ms, created_at_ms) VALUES (?, ?, ?, 'pending', ?, ?, ?, ?)",
            [holdID, userID, amountTokens, reason, metadata, now.addingTimeInterval(Double(ttlSeconds)), now])
        for (index, part) in parts.enumerated() {
            try await post(tx, &state, from: Self.accountID(userID, part.bucket), to: Self.holds, amount: part.amount, reason: "hold",
                           userDelta: (part.bucket, -part.amount), operation: holdID, metadata: metadata, now: now, holdID: holdID)
            if let lot = part.lotID { try await tx.query("UPDATE ledger_lots SET remaining = remaining - ? WHERE id = ?", [part.amount, lot]) }
            try await tx.query(
                "INSERT INTO ledger_hold_parts (hold_id, part, bucket, lot_id, amount) VALUES (?, ?, ?, ?, ?)",
                [holdID, index, part.bucket.rawValue, part.lotID, part.amount])
        }
        return try await holdState(tx, id: holdID)!
    }

    /// Posts up to the held amount (default all) to consumption and returns the rest. Resolves once.
    public func capture(_ tx: any SQLExecutor, holdID: String, amountTokens: Int64? = nil) async throws -> HoldState {
        let (hold, now, state) = try await pendingHold(tx, holdID: holdID)
        let captured = amountTokens ?? hold.amount
        guard captured >= 1, captured <= hold.amount else { throw LedgerError.invalid("amount must be from 1 to the held \(hold.amount).") }
        var remaining = captured
        var userState = state
        for part in try await holdParts(tx, holdID: holdID) {
            let take = min(remaining, part.amount)
            remaining -= take
            if take > 0 {
                try await post(tx, &userState, from: Self.holds, to: Self.consumption, amount: take, reason: "capture",
                               userDelta: nil, userID: hold.userId, operation: holdID, metadata: nil, now: now, holdID: holdID)
            }
            if part.amount - take > 0 {
                try await release(tx, &userState, part: part, amount: part.amount - take, userID: hold.userId, holdID: holdID, reason: "release", now: now)
            }
        }
        try await tx.query(
            "UPDATE ledger_holds SET status = 'captured', captured_amount = ?, resolved_at_ms = ? WHERE id = ?", [captured, now, holdID])
        return try await holdState(tx, id: holdID)!
    }

    /// Returns everything a pending hold reserved. Resolves once.
    public func void(_ tx: any SQLExecutor, holdID: String) async throws -> HoldState {
        let (_, now, state) = try await pendingHold(tx, holdID: holdID)
        var userState = state
        try await releaseAll(tx, &userState, holdID: holdID, status: "voided", reason: "void", now: now)
        return try await holdState(tx, id: holdID)!
    }

    /// Balances now (after releasing the user's expired holds and lots).
    public func balances(_ tx: any SQLExecutor, userID: String) async throws -> BucketBalances {
        let now = clock.now()
        let state = try await prepare(tx, userID: userID, now: now)
        return try await balances(tx, state: state, now: now)
    }

    /// Newest first, at most `limit` (≤ 100), before the `cursor` returned by the previous page.
    public func history(_ tx: any SQLExecutor, userID: String, limit: Int, cursor: Int64?) async throws -> (entries: [HistoryEntry], nextCursor: Int64?) {
        let pageSize = min(max(limit, 1), LedgerLimits.historyPageMax)
        let rows = try await tx.query(
            """
            SELECT seq, id, user_amount, user_bucket, reason, created_at_ms, user_balance_after, metadata FROM ledger_transfers
            WHERE user_id = ? AND user_amount <> 0 AND seq < ? ORDER BY seq DESC LIMIT ?
            """, [userID, cursor ?? Int64.max, pageSize + 1])
        let entries = try rows.prefix(pageSize).map { row in
            HistoryEntry(
                id: try row.string("id"), amount: try row.int("user_amount"), bucket: row.optionalString("user_bucket"), reason: try row.string("reason"),
                createdAt: try row.date("created_at_ms"), balanceAfter: row.optionalInt("user_balance_after"), metadata: row.optionalString("metadata"),
                seq: try row.int("seq"))
        }
        return (entries, rows.count > pageSize ? entries.last?.seq : nil)
    }

    /// Starts a subscription period exactly once per (user, `periodKey`): subscription tokens above
    /// `maxRolloverTokens` expire, then `monthlyTokens` are granted. Returns false when already done.
    public func startPeriod(
        _ tx: any SQLExecutor, userID: String, periodKey: String, planID: String, monthlyTokens: Int64, maxRolloverTokens: Int64
    ) async throws -> Bool {
        let now = clock.now()
        var state = try await prepare(tx, userID: userID, now: now)
        let claimed = try await tx.query(
            """
            INSERT INTO ledger_period_grants (user_id, period_key, plan_id, granted, expired, created_at_ms) VALUES (?, ?, ?, 0, 0, ?)
            ON CONFLICT (user_id, period_key) DO NOTHING RETURNING user_id
            """, [userID, periodKey, planID, now])
        guard !claimed.isEmpty else { return false }
        let operation = Self.newID()
        let excess = state.balances[.subscription] - max(0, maxRolloverTokens)
        if excess > 0 {
            try await post(tx, &state, from: Self.accountID(userID, .subscription), to: Self.expired, amount: excess, reason: "rollover_expiry",
                           userDelta: (.subscription, -excess), operation: operation, metadata: nil, now: now)
        }
        if monthlyTokens > 0 {
            try await post(tx, &state, from: Self.issuance, to: Self.accountID(userID, .subscription), amount: monthlyTokens,
                           reason: "subscription_period", userDelta: (.subscription, monthlyTokens), operation: operation, metadata: nil, now: now)
        }
        try await tx.query(
            "UPDATE ledger_period_grants SET granted = ?, expired = ? WHERE user_id = ? AND period_key = ?",
            [monthlyTokens, max(0, excess), userID, periodKey])
        return true
    }

    /// When the user's subscription tokens were last granted.
    public func lastSubscriptionRefresh(_ tx: any SQLExecutor, userID: String) async throws -> Date? {
        try await tx.first("SELECT MAX(created_at_ms) AS at FROM ledger_period_grants WHERE user_id = ?", [userID])?.optionalDate("at")
    }

    /// Releases pending holds that expired (at most `limit`), one user at a time; returns how many.
    public func expireHolds(_ database: any Database, limit: Int, logger: Logger) async throws -> Int {
        let now = clock.now()
        let due = try await database.withConnection(logger: logger) { tx in
            try await tx.query(
                "SELECT DISTINCT user_id FROM ledger_holds WHERE status = 'pending' AND expires_at_ms <= ? LIMIT ?", [now, max(1, min(limit, 1000))])
        }
        var released = 0
        for row in due {
            let userID = try row.string("user_id")
            released += try await database.transaction(logger: logger) { tx in
                try await prepare(tx, userID: userID, now: clock.now()).expiredHolds
            }
        }
        return released
    }

    // MARK: - Internals

    /// The user's locked accounts and their balances while an operation runs.
    struct UserState {
        let userID: String
        var balances: BucketBalances
        var expiredHolds = 0
        var total: Int64 { balances.totalTokens }
    }

    struct Part {
        let bucket: Bucket
        let lotID: String?
        let amount: Int64
    }

    /// Locks the user's bucket accounts (creating them on first use) in a fixed order, then releases the
    /// user's expired holds and expires the user's lapsed bonus lots, so what follows sees spendable balances.
    func prepare(_ tx: any SQLExecutor, userID: String, now: Date) async throws -> UserState {
        var rows = try await lockAccounts(tx, userID: userID)
        if rows.count < Bucket.allCases.count {
            for bucket in Bucket.allCases {
                try await tx.query(
                    "INSERT INTO ledger_accounts (id, user_id, bucket, balance, created_at_ms) VALUES (?, ?, ?, 0, ?) ON CONFLICT (id) DO NOTHING",
                    [Self.accountID(userID, bucket), userID, bucket.rawValue, now])
            }
            rows = try await lockAccounts(tx, userID: userID)
        }
        var balances = BucketBalances.zero
        for row in rows {
            guard let bucket = Bucket(rawValue: try row.string("bucket")) else { continue }
            balances[bucket] = try row.int("balance")
        }
        var state = UserState(userID: userID, balances: balances)
        // One round trip finds what lapsed (expired holds, lapsed bonus lots) and what is held. Holds and lots
        // change only under the account locks taken above, so no further row locks are needed.
        let pending = try await tx.query(
            """
            SELECT 'hold' AS kind, id, amount, expires_at_ms FROM ledger_holds WHERE user_id = ? AND status = 'pending'
            UNION ALL
            SELECT 'lot' AS kind, id, remaining AS amount, expires_at_ms FROM ledger_lots
                WHERE user_id = ? AND remaining > 0 AND expires_at_ms IS NOT NULL AND expires_at_ms <= ?
            """, [userID, userID, now])
        var lapsedLots: [(id: String, amount: Int64)] = []
        for row in pending {
            let amount = try row.int("amount")
            if try row.string("kind") == "lot" {
                lapsedLots.append((try row.string("id"), amount))
            } else if try row.date("expires_at_ms") <= now {
                try await releaseAll(tx, &state, holdID: try row.string("id"), status: "expired", reason: "hold_expiry", now: now)
                state.expiredHolds += 1
            } else {
                state.balances.heldTokens += amount
            }
        }
        if state.expiredHolds > 0 {
            // Released holds may have returned tokens to lapsed lots: read those lots again (rare path).
            lapsedLots = try await tx.query(
                "SELECT id, remaining FROM ledger_lots WHERE user_id = ? AND remaining > 0 AND expires_at_ms IS NOT NULL AND expires_at_ms <= ?",
                [userID, now]
            ).map { (try $0.string("id"), try $0.int("remaining")) }
        }
        for lot in lapsedLots {
            try await post(tx, &state, from: Self.accountID(userID, .bonus), to: Self.expired, amount: lot.amount, reason: "bonus_expiry",
                           userDelta: (.bonus, -lot.amount), operation: Self.newID(), metadata: nil, now: now)
            try await tx.query("UPDATE ledger_lots SET remaining = 0 WHERE id = ?", [lot.id])
        }
        return state
    }

    func lockAccounts(_ tx: any SQLExecutor, userID: String) async throws -> [SQLRow] {
        try await tx.query("SELECT id, bucket, balance FROM ledger_accounts WHERE user_id = ? ORDER BY id" + tx.dialect.forUpdate, [userID])
    }

    /// Splits `amountTokens` over the buckets in spend order, or throws `insufficientTokens`.
    func allocate(_ tx: any SQLExecutor, state: UserState, userID: String, amountTokens: Int64, now: Date) async throws -> [Part] {
        guard state.total >= amountTokens else { throw LedgerError.insufficientTokens(availableTokens: state.total) }
        var remaining = amountTokens
        var parts: [Part] = []
        if state.balances.bonusTokens > 0 {
            let lots = try await tx.query(
                """
                SELECT id, remaining FROM ledger_lots WHERE user_id = ? AND remaining > 0
                ORDER BY CASE WHEN expires_at_ms IS NULL THEN 1 ELSE 0 END, expires_at_ms, created_at_ms, id LIMIT 1000
                """, [userID])
            for lot in lots where remaining > 0 {
                let take = min(remaining, try lot.int("remaining"))
                parts.append(Part(bucket: .bonus, lotID: try lot.string("id"), amount: take))
                remaining -= take
            }
        }
        for bucket in [Bucket.subscription, .purchased] where remaining > 0 {
            let take = min(remaining, state.balances[bucket])
            if take > 0 { parts.append(Part(bucket: bucket, lotID: nil, amount: take)) }
            remaining -= take
        }
        precondition(remaining == 0, "allocation must cover the amount once the total was checked")
        return parts
    }

    /// Records one transfer and applies it to the user's bucket balance.
    func post(
        _ tx: any SQLExecutor, _ state: inout UserState, from debit: String, to credit: String, amount: Int64, reason: String,
        userDelta: (Bucket, Int64)?, userID: String? = nil, operation: String, metadata: String?, now: Date, holdID: String? = nil
    ) async throws {
        precondition(amount > 0, "transfers move a positive amount")
        LedgerMetrics.transfer(reason: reason)
        let insert = """
            INSERT INTO ledger_transfers (id, operation_id, debit_account_id, credit_account_id, amount, reason, user_id, user_amount, user_bucket,
                                          user_balance_after, hold_id, metadata, created_at_ms)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """
        var update: (sql: String, binds: [any SQLBindable])?
        if let (bucket, delta) = userDelta {
            state.balances[bucket] += delta
            precondition(state.balances[bucket] >= 0, "a user bucket never goes below zero")
            update = ("UPDATE ledger_accounts SET balance = balance + ? WHERE id = ?", [delta, Self.accountID(state.userID, bucket)])
        }
        let transfer: [any SQLBindable] = [
            Self.newID(), operation, debit, credit, amount, reason, userID ?? state.userID, userDelta?.1 ?? 0, userDelta?.0.rawValue,
            userDelta == nil ? nil : state.total, holdID, metadata, now,
        ]
        if let update, tx.engine == .postgres {
            // One round trip on PostgreSQL (a data-modifying CTE), made while the user's account rows are locked.
            try await tx.query("WITH balance AS (\(update.sql)) " + insert, update.binds + transfer)
        } else {
            if let update { try await tx.query(update.sql, update.binds) }
            try await tx.query(insert, transfer)
        }
    }

    /// Reads a hold, locks its user's accounts first (fixed lock order), then checks it is still pending.
    func pendingHold(_ tx: any SQLExecutor, holdID: String) async throws -> (HoldState, Date, UserState) {
        guard let unlocked = try await holdState(tx, id: holdID) else { throw LedgerError.holdNotFound }
        let now = clock.now()
        let state = try await prepare(tx, userID: unlocked.userId, now: now)  // releases it if it expired
        guard let hold = try await tx.first("SELECT * FROM ledger_holds WHERE id = ?" + tx.dialect.forUpdate, [holdID]).map(HoldState.init) else {
            throw LedgerError.holdNotFound
        }
        guard hold.status == "pending" else { throw LedgerError.holdResolved(hold) }
        return (hold, now, state)
    }

    func holdState(_ tx: any SQLExecutor, id: String) async throws -> HoldState? {
        try await tx.first("SELECT * FROM ledger_holds WHERE id = ?", [id]).map(HoldState.init)
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
        try await tx.query("UPDATE ledger_holds SET status = ?, captured_amount = 0, resolved_at_ms = ? WHERE id = ?", [status, now, holdID])
    }

    /// Returns held tokens to the bucket (and bonus lot) they came from. An already lapsed lot expires them
    /// at the next access.
    func release(_ tx: any SQLExecutor, _ state: inout UserState, part: Part, amount: Int64, userID: String, holdID: String, reason: String, now: Date)
        async throws
    {
        try await post(tx, &state, from: Self.holds, to: Self.accountID(userID, part.bucket), amount: amount, reason: reason,
                       userDelta: (part.bucket, amount), operation: holdID, metadata: nil, now: now, holdID: holdID)
        if let lot = part.lotID { try await tx.query("UPDATE ledger_lots SET remaining = remaining + ? WHERE id = ?", [amount, lot]) }
    }

    func balances(_ tx: any SQLExecutor, state: UserState, now: Date) async throws -> BucketBalances { state.balances }

    static func check(amountTokens: Int64, reason: String, metadata: String?) throws {
        guard amountTokens >= 1, amountTokens <= LedgerLimits.amountTokensMax else {
            throw LedgerError.invalid("amount must be a whole number from 1 to \(LedgerLimits.amountTokensMax).")
        }
        guard !reason.isEmpty, reason.count <= LedgerLimits.reasonLengthMax, reason.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" || $0 == ".") }) else {
            throw LedgerError.invalid("reason must be 1 to \(LedgerLimits.reasonLengthMax) characters of letters, digits, '_', '-' or '.'.")
        }
        if let metadata, metadata.utf8.count > LedgerLimits.metadataBytesMax {
            throw LedgerError.invalid("metadata must be at most \(LedgerLimits.metadataBytesMax) bytes of JSON.")
        }
    }

    static func newID() -> String { UUID().uuidString.lowercased() }
}

extension Ledger {
    /// Takes back up to `amountTokens` from a bucket into the clawback account, never below zero. Returns what
    /// was taken and the shortfall (already spent), so callers can record it.
    public func clawback(_ tx: any SQLExecutor, userID: String, amountTokens: Int64, bucket: Bucket, reason: String) async throws
        -> (clawedTokens: Int64, shortfallTokens: Int64)
    {
        try Self.check(amountTokens: amountTokens, reason: reason, metadata: nil)
        let now = clock.now()
        var state = try await prepare(tx, userID: userID, now: now)
        let take = min(amountTokens, state.balances[bucket])
        if take > 0 {
            if bucket == .bonus {
                // Bonus tokens live in lots: take from the latest-expiring lots first (the ones a user would spend last).
                var left = take
                let lots = try await tx.query(
                    "SELECT id, remaining FROM ledger_lots WHERE user_id = ? AND remaining > 0 ORDER BY CASE WHEN expires_at_ms IS NULL THEN 0 ELSE 1 END, expires_at_ms DESC, id",
                    [userID])
                for lot in lots where left > 0 {
                    let t = min(left, try lot.int("remaining"))
                    try await tx.query("UPDATE ledger_lots SET remaining = remaining - ? WHERE id = ?", [t, try lot.string("id")])
                    left -= t
                }
            }
            try await post(tx, &state, from: Self.accountID(userID, bucket), to: Self.clawback, amount: take, reason: reason,
                           userDelta: (bucket, -take), operation: Self.newID(), metadata: nil, now: now)
        }
        return (take, amountTokens - take)
    }

    /// What a period grant gave, for clawbacks.
    public func periodGrant(_ tx: any SQLExecutor, userID: String, periodKey: String) async throws -> Int64? {
        try await tx.first("SELECT granted FROM ledger_period_grants WHERE user_id = ? AND period_key = ?", [userID, periodKey])?.optionalInt("granted")
    }
}

extension Ledger {
    /// Spendable balances without locks or writes (for reads): stored balances, with expired holds counted as
    /// returned and lapsed bonus lots as expired, exactly as the next write will settle them.
    public func peekBalances(_ tx: any SQLExecutor, userID: String) async throws -> BucketBalances {
        let now = clock.now()
        var balances = BucketBalances.zero
        for row in try await tx.query("SELECT bucket, balance FROM ledger_accounts WHERE user_id = ?", [userID]) {
            if let bucket = Bucket(rawValue: try row.string("bucket")) { balances[bucket] = try row.int("balance") }
        }
        let pending = try await tx.query(
            """
            SELECT 'hold' AS kind, id, amount, expires_at_ms FROM ledger_holds WHERE user_id = ? AND status = 'pending'
            UNION ALL
            SELECT 'lot' AS kind, id, remaining AS amount, expires_at_ms FROM ledger_lots
                WHERE user_id = ? AND remaining > 0 AND expires_at_ms IS NOT NULL AND expires_at_ms <= ?
            """, [userID, userID, now])
        for row in pending {
            let amount = try row.int("amount")
            if try row.string("kind") == "lot" {
                balances.bonusTokens -= amount
            } else if try row.date("expires_at_ms") <= now {
                let parts = try await tx.query(
                    """
                    SELECT p.bucket, p.amount, l.expires_at_ms AS lot_expires_at_ms FROM ledger_hold_parts p
                    LEFT JOIN ledger_lots l ON l.id = p.lot_id WHERE p.hold_id = ?
                    """, [try row.string("id")])
                for part in parts {
                    guard let bucket = Bucket(rawValue: try part.string("bucket")) else { continue }
                    if let lotExpiry = part.optionalDate("lot_expires_at_ms"), lotExpiry <= now { continue }  // returns into a lapsed lot: expires at once
                    balances[bucket] += try part.int("amount")
                }
            } else {
                balances.heldTokens += amount
            }
        }
        return balances
    }
}

/// `ledger_transfers{reason}`. Reasons come from callers, so at most `distinctReasonsMax` distinct values are
/// labelled; later ones count as `other` (bounded series, whatever callers send).
enum LedgerMetrics {
    static let distinctReasonsMax = 64
    static let seen = Mutex<Set<String>>([])

    static func transfer(reason: String) {
        let label = seen.withLock { known -> String in
            if known.contains(reason) { return reason }
            guard known.count < distinctReasonsMax else { return "other" }
            known.insert(reason)
            return reason
        }
        Counter(label: "ledger_transfers", dimensions: [("reason", label)]).increment()
    }

    /// `ledger_spends{path}`: one-shot spends made by PostgreSQL's single statement or by the transactional path.
    static func spend(path: String) {
        Counter(label: "ledger_spends", dimensions: [("path", path)]).increment()
    }
}
