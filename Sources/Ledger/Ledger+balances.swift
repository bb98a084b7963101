import Clock
import Foundation
import Storage

extension Ledger {
    /// Spendable balances without locks or writes (for reads): stored balances, with expired holds counted as
    /// returned and lapsed bonus lots as expired, exactly as the next write will settle them (``HoldRules``).
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
            } else if HoldRules.isExpired(expiresAt: try row.date("expires_at_ms"), now: now) {
                try await countReturned(tx, holdID: try row.string("id"), into: &balances, now: now)
            } else {
                balances.heldTokens += amount
            }
        }
        return balances
    }

    /// An expired hold's parts as if already returned; parts that would return into a lapsed lot expire at once.
    func countReturned(_ tx: any SQLExecutor, holdID: String, into balances: inout BucketBalances, now: Date) async throws {
        let parts = try await tx.query(
            """
            SELECT p.bucket, p.amount, l.expires_at_ms AS lot_expires_at_ms FROM ledger_hold_parts p
            LEFT JOIN ledger_lots l ON l.id = p.lot_id WHERE p.hold_id = ?
            """, [holdID])
        for part in parts {
            guard let bucket = Bucket(rawValue: try part.string("bucket")) else { continue }
            if let lotExpiry = part.optionalDate("lot_expires_at_ms"), lotExpiry <= now { continue }
            balances[bucket] += try part.int("amount")
        }
    }
}
