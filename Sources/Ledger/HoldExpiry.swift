import Clock
import Foundation
import Logging
import Storage

/// Hold expiry, in one file: the rule, its SQL forms, the release at the next access to the user's accounts and the
/// sweeper's drain of a backlog.
///
/// **Expiry**: a pending hold whose `expires_at` is at or before now is expired. It is never captured; its tokens go back
/// to the buckets (and bonus lots) they came from at the next access to the user's accounts (``settleExpiredHolds``; a
/// read of the user's entitlement snapshot counts, ``releaseExpiredHolds(_:userID:logger:)``), or by the sweeper (``Ledger/expireHoldBacklog(_:batch:batches:logger:)``). Until then every read treats it as already returned: ``peekBalances``
/// and the entitlement snapshot (``Ledger/snapshotFragment(engine:)``) use ``HoldRules/expired`` / ``HoldRules/live``,
/// and PostgreSQL's `ledger_spend_once` (migrations 0008, 0017) declines to spend while one exists. `LedgerFragmentTests`
/// keeps the SQL forms equal to these.
public enum HoldRules {
    /// Whether a pending hold with this expiry is expired at `now`.
    public static func isExpired(expiresAt: Date, now: Date) -> Bool { expiresAt <= now }
    /// SQL: a pending hold's row (columns of `ledger_holds`) is expired at `now` (the `?` or the named time column).
    public static func expired(now: String = "?") -> String { "expires_at_ms <= \(now)" }
    /// SQL: a pending hold's row is still holding its tokens at `now`.
    public static func live(now: String = "?") -> String { "expires_at_ms > \(now)" }
}

extension Ledger {
    /// The sweeper's drain of a backlog (many holds expired at once): batches of `batch` users' holds while they come back
    /// full, at most `batches` of them; each user's release is its own short transaction. Returns how many were released.
    public func expireHoldBacklog(_ database: any Database, batch: Int, batches: Int, logger: Logger) async throws -> Int {
        var released = 0
        for _ in 0..<batches {
            let count = try await expireHolds(database, limit: batch, logger: logger)
            released += count
            if count < batch { break }
        }
        return released
    }

    /// Releases pending holds that expired (at most `limit`), one user at a time; returns how many.
    public func expireHolds(_ database: any Database, limit: Int, logger: Logger) async throws -> Int {
        let now = clock.now()
        let due = try await database.withConnection(logger: logger) { tx in
            try await tx.query(
                "SELECT DISTINCT user_id FROM ledger_holds WHERE status = 'pending' AND \(HoldRules.expired()) LIMIT ?",
                [now, max(1, min(limit, 1000))])
        }
        var released = 0
        for row in due { released += try await releaseExpiredHolds(database, userID: try row.string("user_id"), logger: logger) }
        return released
    }

    /// Releases the user's expired pending holds now, in one short transaction (the sweeper's step, and the entitlement
    /// snapshot's when its statement finds one: the user's later reads then take the one-statement path). Returns how many.
    public func releaseExpiredHolds(_ database: any Database, userID: String, logger: Logger) async throws -> Int {
        try await database.transaction(logger: logger) { tx in try await prepare(tx, userID: userID, now: clock.now()).expiredHolds }
    }

    /// During ``prepare(_:userID:now:)``, under the user's account locks: releases the user's expired pending holds and
    /// counts the live ones as held.
    func settleExpiredHolds(_ tx: any SQLExecutor, _ state: inout UserState, pending: [SQLRow], now: Date) async throws {
        for row in pending {
            if HoldRules.isExpired(expiresAt: try row.date("expires_at_ms"), now: now) {
                try await releaseAll(tx, &state, holdID: try row.string("id"), status: "expired", reason: "hold_expiry", now: now)
                state.expiredHolds += 1
                if let expired = try await holdState(tx, id: try row.string("id")) {
                    try await emitHold(tx, .holdExpired, expired, state, change: expired.amount, key: nil, now: now)
                }
            } else {
                state.balances.heldTokens += try row.int("amount")
            }
        }
    }
}
