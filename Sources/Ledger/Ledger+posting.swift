import Clock
import Foundation
import Metrics
import Storage
import Synchronization

/// Double-entry posting: every movement is one transfer between two accounts, made while the user's bucket accounts
/// are locked (in a fixed order, so two operations on one user never deadlock).
extension Ledger {
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

    /// Locks the user's bucket accounts (creating them on first use) in a fixed order, then settles what lapsed: the
    /// user's expired holds are released (``settleExpiredHolds(_:_:pending:now:)``) and lapsed bonus lots expire, so what
    /// follows sees spendable balances.
    func prepare(_ tx: any SQLExecutor, userID: String, now: Date) async throws -> UserState {
        let rows = try await lockedAccounts(tx, userID: userID, now: now)
        var balances = BucketBalances.zero
        for row in rows {
            guard let bucket = Bucket(rawValue: try row.string("bucket")) else { continue }
            balances[bucket] = try row.int("balance")
        }
        var state = UserState(userID: userID, balances: balances)
        // One round trip finds what lapsed (pending holds, lapsed bonus lots). Holds and lots change only under the account
        // locks taken above, so no further row locks are needed.
        let pending = try await tx.query(
            """
            SELECT 'hold' AS kind, id, amount, expires_at_ms FROM ledger_holds WHERE user_id = ? AND status = 'pending'
            UNION ALL
            SELECT 'lot' AS kind, id, remaining AS amount, expires_at_ms FROM ledger_lots
                WHERE user_id = ? AND remaining > 0 AND expires_at_ms IS NOT NULL AND expires_at_ms <= ?
            """, [userID, userID, now])
        try await settleExpiredHolds(tx, &state, pending: pending.filter { (try? $0.string("kind")) == "hold" }, now: now)
        var lapsedLots = try pending.filter { try $0.string("kind") == "lot" }.map { (id: try $0.string("id"), amount: try $0.int("amount")) }
        if state.expiredHolds > 0 {
            // Released holds may have returned tokens to lapsed lots: read those lots again (rare path).
            lapsedLots = try await tx.query(
                "SELECT id, remaining FROM ledger_lots WHERE user_id = ? AND remaining > 0 AND expires_at_ms IS NOT NULL AND expires_at_ms <= ?",
                [userID, now]
            ).map { (try $0.string("id"), try $0.int("remaining")) }
        }
        for lot in lapsedLots {
            try await post(
                tx, &state, from: Self.accountID(userID, .bonus), to: Self.expired, amount: lot.amount, reason: "bonus_expiry",
                userDelta: (.bonus, -lot.amount), operation: Self.newID(), metadata: nil, now: now)
            try await tx.query("UPDATE ledger_lots SET remaining = 0 WHERE id = ?", [lot.id])
        }
        return state
    }

    /// Locks the user's accounts before a transaction locks any other row of theirs that it then changes with their
    /// tokens (a purchase request it resolves): every spend, hold and unlock takes the accounts first and such rows
    /// after, so taking them in the same order keeps the two from deadlocking.
    /// The subscription machine takes them the same way before it reads a subscription it may change, so that one user's
    /// subscription events (racing webhook deliveries, an operator's comp) apply one at a time; `creating` them when
    /// missing (for a user known to exist): a user's first event has no accounts yet, and two such events would otherwise
    /// lock nothing.
    /// On SQLite, where write transactions run one at a time, only `creating` does anything.
    public func lockAccountsFirst(_ tx: any SQLExecutor, userID: String, creating: Bool = false) async throws {
        if creating {
            _ = try await lockedAccounts(tx, userID: userID, now: clock.now())
        } else if tx.engine == .postgres {
            _ = try await lockAccounts(tx, userID: userID)
        }
    }

    /// The user's bucket accounts, locked in a fixed order, created first when missing.
    func lockedAccounts(_ tx: any SQLExecutor, userID: String, now: Date) async throws -> [SQLRow] {
        let rows = try await lockAccounts(tx, userID: userID)
        guard rows.count < Bucket.allCases.count else { return rows }
        for bucket in Bucket.allCases {
            try await tx.query(
                "INSERT INTO ledger_accounts (id, user_id, bucket, balance, created_at_ms) VALUES (?, ?, ?, 0, ?) ON CONFLICT (id) DO NOTHING",
                [Self.accountID(userID, bucket), userID, bucket.rawValue, now])
        }
        return try await lockAccounts(tx, userID: userID)
    }

    func lockAccounts(_ tx: any SQLExecutor, userID: String) async throws -> [SQLRow] {
        try await tx.query("SELECT id, bucket, balance FROM ledger_accounts WHERE user_id = ? ORDER BY id" + tx.dialect.forUpdate, [userID])
    }

    /// Splits `amountTokens` over the buckets in spend order, or throws `insufficientTokens`.
    func allocate(_ tx: any SQLExecutor, state: UserState, userID: String, amountTokens: Int64, now: Date) async throws -> [Part] {
        guard state.total >= amountTokens else { throw LedgerError.insufficientTokens(availableTokens: state.total) }
        var remaining = amountTokens
        var parts: [Part] = []
        var lotsRead = 0
        while state.balances.bonusTokens > 0, remaining > 0 {
            // Soonest-expiring lots first, a page at a time: a user may hold any number of bonus lots.
            let lots = try await tx.query(
                """
                SELECT id, remaining FROM ledger_lots WHERE user_id = ? AND remaining > 0
                ORDER BY CASE WHEN expires_at_ms IS NULL THEN 1 ELSE 0 END, expires_at_ms, created_at_ms, id LIMIT ? OFFSET ?
                """, [userID, Self.lotPage, lotsRead])
            for lot in lots where remaining > 0 {
                let take = min(remaining, try lot.int("remaining"))
                parts.append(Part(bucket: .bonus, lotID: try lot.string("id"), amount: take))
                remaining -= take
            }
            lotsRead += lots.count
            if lots.count < Self.lotPage { break }
        }
        for bucket in [Bucket.subscription, .purchased] where remaining > 0 {
            let take = min(remaining, state.balances[bucket])
            if take > 0 { parts.append(Part(bucket: bucket, lotID: nil, amount: take)) }
            remaining -= take
        }
        // Only if the lots disagree with the bonus balance (`ledger verify` reports that): refuse, never trap.
        guard remaining == 0 else { throw LedgerError.insufficientTokens(availableTokens: amountTokens - remaining) }
        return parts
    }

    public static let lotPage = 1000

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
            // A user bucket never goes below zero; only books that disagree (`ledger verify` reports them) could: refuse
            // the operation (it rolls back), never trap.
            guard state.balances[bucket] >= 0 else { throw StorageError.decoding(column: "ledger_accounts.balance") }
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

    static func check(amountTokens: Int64, reason: String, metadata: String?) throws {
        guard amountTokens >= 1, amountTokens <= LedgerLimits.amountTokensMax else {
            throw LedgerError.invalid("amount must be a whole number from 1 to \(LedgerLimits.amountTokensMax).")
        }
        guard !reason.isEmpty, reason.count <= LedgerLimits.reasonLengthMax,
            reason.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" || $0 == ".") })
        else {
            throw LedgerError.invalid("reason must be 1 to \(LedgerLimits.reasonLengthMax) characters of letters, digits, '_', '-' or '.'.")
        }
        if let metadata, metadata.utf8.count > LedgerLimits.metadataBytesMax {
            throw LedgerError.invalid("metadata must be at most \(LedgerLimits.metadataBytesMax) bytes of JSON.")
        }
    }

    static func newID() -> String { FreshID.uuid() }
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
