import Foundation
import Storage

extension Ledger {
    /// The ledger's part of the entitlement snapshot statement (Entitlements' `SnapshotStatement`), which reads everything
    /// in one statement for speed. The embedding statement provides `x.id` (the user) and `n.now_ms` (epoch ms).
    ///
    /// Columns: `bonus_balance`, `subscription_balance`, `purchased_balance` (stored), `held` (pending holds still live),
    /// `expired_holds` (pending holds already expired: the caller then takes the transactional path, which settles them),
    /// `lapsed` (bonus tokens in lots that expired). ``peekBalances(_:userID:)`` reads the same figures, and
    /// `LedgerFragmentTests` keeps the two equal. Each part is a lookup by user id: on PostgreSQL one lateral index scan for
    /// the three balances and one for both hold figures; SQLite has no LATERAL, and its correlated subqueries are index
    /// lookups too.
    public static func snapshotFragment(engine: Engine) -> SQLJoinFragment {
        let lapsed = """
            CAST((SELECT COALESCE(SUM(remaining), 0) FROM ledger_lots
                 WHERE user_id = x.id AND remaining > 0 AND expires_at_ms IS NOT NULL AND expires_at_ms <= n.now_ms) AS BIGINT) AS lapsed
            """
        let live = HoldRules.live(now: "n.now_ms")
        let expired = HoldRules.expired(now: "n.now_ms")
        guard engine == .postgres else {
            return SQLJoinFragment(
                select: """
                    CAST((SELECT COALESCE(SUM(balance), 0) FROM ledger_accounts WHERE user_id = x.id AND bucket = 'bonus') AS BIGINT) AS bonus_balance,
                      CAST((SELECT COALESCE(SUM(balance), 0) FROM ledger_accounts WHERE user_id = x.id AND bucket = 'subscription') AS BIGINT) AS subscription_balance,
                      CAST((SELECT COALESCE(SUM(balance), 0) FROM ledger_accounts WHERE user_id = x.id AND bucket = 'purchased') AS BIGINT) AS purchased_balance,
                      CAST((SELECT COALESCE(SUM(amount), 0) FROM ledger_holds WHERE user_id = x.id AND status = 'pending' AND \(live)) AS BIGINT) AS held,
                      (SELECT COUNT(*) FROM ledger_holds WHERE user_id = x.id AND status = 'pending' AND \(expired)) AS expired_holds,
                      \(lapsed)
                    """, joins: "", columns: snapshotColumns)
        }
        return SQLJoinFragment(
            select: "a.bonus_balance, a.subscription_balance, a.purchased_balance, h.held, h.expired_holds,\n  \(lapsed)",
            joins: """
                CROSS JOIN LATERAL (
                  SELECT CAST(COALESCE(SUM(balance) FILTER (WHERE bucket = 'bonus'), 0) AS BIGINT) AS bonus_balance,
                    CAST(COALESCE(SUM(balance) FILTER (WHERE bucket = 'subscription'), 0) AS BIGINT) AS subscription_balance,
                    CAST(COALESCE(SUM(balance) FILTER (WHERE bucket = 'purchased'), 0) AS BIGINT) AS purchased_balance
                  FROM ledger_accounts WHERE user_id = x.id) a
                CROSS JOIN LATERAL (
                  SELECT CAST(COALESCE(SUM(amount) FILTER (WHERE \(live)), 0) AS BIGINT) AS held,
                    COUNT(*) FILTER (WHERE \(expired)) AS expired_holds
                  FROM ledger_holds WHERE user_id = x.id AND status = 'pending') h
                """, columns: snapshotColumns)
    }

    static let snapshotColumns = ["bonus_balance", "subscription_balance", "purchased_balance", "held", "expired_holds", "lapsed"]

    /// The balances in a row of the snapshot fragment: stored balances less lapsed lots, and what live holds reserve.
    public static func snapshotBalances(_ row: SQLRow) throws -> BucketBalances {
        BucketBalances(
            bonusTokens: try row.int("bonus_balance") - row.int("lapsed"), subscriptionTokens: try row.int("subscription_balance"),
            purchasedTokens: try row.int("purchased_balance"), heldTokens: try row.int("held"))
    }
}
