import Foundation
import Storage

extension Ledger {
    /// Differences reported per check, at most (the report says when a check had more).
    static let verifyDifferencesMax = 1000

    /// Recomputes every balance from the transfers and checks the invariants: every stored user balance equals the
    /// sum of its transfers and is not negative; the holds account equals the pending holds; each user's bonus balance
    /// equals the remainder of its lots; each hold's parts add up. (The ledger summing to zero needs no check: each
    /// transfer credits and debits the same amount.) The database compares and returns only the differences, so memory
    /// stays flat however many accounts there are.
    public func verify(_ tx: any SQLExecutor) async throws -> VerifyReport {
        var differences: [String] = []
        let limit = Self.verifyDifferencesMax + 1
        // One pass over the transfers sums every account. The user accounts that differ come back, and always, first, the
        // holds account (its sum is what the pending holds must add up to; no index serves its transfers on their own),
        // with the pending holds read by the same statement: both sides of that check from one moment, even when the
        // verify runs beside live traffic outside a transaction.
        let accounts = try await tx.query(
            """
            SELECT a.id, a.balance, COALESCE(d.derived, 0) AS derived,
                (SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT) FROM ledger_holds WHERE status = 'pending') AS pending
            FROM ledger_accounts a LEFT JOIN (
                SELECT account_id, CAST(SUM(delta) AS BIGINT) AS derived FROM (
                    SELECT credit_account_id AS account_id, amount AS delta FROM ledger_transfers
                    UNION ALL SELECT debit_account_id AS account_id, -amount AS delta FROM ledger_transfers) movements
                GROUP BY account_id) d ON d.account_id = a.id
            WHERE a.id = ? OR (a.user_id IS NOT NULL AND (a.balance <> COALESCE(d.derived, 0) OR a.balance < 0))
            ORDER BY CASE WHEN a.id = ? THEN 0 ELSE 1 END, a.id LIMIT ?
            """, [Self.holds, Self.holds, limit + 1])
        var holds: (held: Int64, pending: Int64)?
        var differing = 0
        for account in accounts {
            let (id, stored, computed) = (try account.string("id"), try account.int("balance"), try account.int("derived"))
            guard id != Self.holds else {
                holds = (computed, try account.int("pending"))
                continue
            }
            differing += 1
            guard differing <= Self.verifyDifferencesMax else { break }
            if stored != computed { differences.append("\(id): stored balance \(stored) but transfers sum to \(computed)") }
            if stored < 0 { differences.append("\(id): negative balance \(stored)") }
        }
        if differing > Self.verifyDifferencesMax {
            differences.append("more user accounts differ (the first \(Self.verifyDifferencesMax) are listed)")
        }
        let totals = try await tx.first(
            "SELECT (SELECT COUNT(*) FROM ledger_accounts) AS accounts, (SELECT COUNT(*) FROM ledger_transfers) AS transfers", [])
        if let (held, pending) = holds {
            if held != pending { differences.append("holds account holds \(held) but pending holds add up to \(pending)") }
        } else {
            differences.append("the holds account \(Self.holds) is missing")
        }
        try await verifyLotsAndHolds(tx, into: &differences)
        try await verifyProfileUsage(tx, into: &differences)
        return VerifyReport(
            ok: differences.isEmpty, accountsChecked: Int(totals?.optionalInt("accounts") ?? 0),
            transfersChecked: Int(totals?.optionalInt("transfers") ?? 0), differences: differences)
    }

    /// Bonus balances against their lots (users with lots but no bonus account too), and holds against their parts.
    func verifyLotsAndHolds(_ tx: any SQLExecutor, into differences: inout [String]) async throws {
        let limit = Self.verifyDifferencesMax + 1
        let bonuses = try await tx.query(
            """
            SELECT u.user_id, COALESCE(a.balance, 0) AS balance, COALESCE(l.remaining, 0) AS remaining FROM (
                SELECT user_id FROM ledger_accounts WHERE bucket = 'bonus' UNION SELECT user_id FROM ledger_lots) u
            LEFT JOIN ledger_accounts a ON a.user_id = u.user_id AND a.bucket = 'bonus'
            LEFT JOIN (SELECT user_id, CAST(SUM(remaining) AS BIGINT) AS remaining FROM ledger_lots GROUP BY user_id) l ON l.user_id = u.user_id
            WHERE COALESCE(a.balance, 0) <> COALESCE(l.remaining, 0) ORDER BY u.user_id LIMIT ?
            """, [limit])
        for row in bonuses.prefix(Self.verifyDifferencesMax) {
            differences.append(
                "user \(try row.string("user_id")): bonus balance \(try row.int("balance")) but its lots hold \(try row.int("remaining"))")
        }
        if bonuses.count == limit { differences.append("more bonus balances differ (the first \(Self.verifyDifferencesMax) are listed)") }
        let badHolds = try await tx.query(
            """
            SELECT h.id, h.amount, CAST(COALESCE(SUM(p.amount), 0) AS BIGINT) AS parts FROM ledger_holds h
            LEFT JOIN ledger_hold_parts p ON p.hold_id = h.id GROUP BY h.id, h.amount HAVING COALESCE(SUM(p.amount), 0) <> h.amount
            ORDER BY h.id LIMIT ?
            """, [limit])
        for hold in badHolds.prefix(Self.verifyDifferencesMax) {
            differences.append("hold \(try hold.string("id")): amount \(try hold.int("amount")) but parts add up to \(try hold.int("parts"))")
        }
        if badHolds.count == limit { differences.append("more holds differ (the first \(Self.verifyDifferencesMax) are listed)") }
    }

    /// Each profile's usage per period against what is behind it: `held` = its pending holds, `used` = its captured
    /// holds' captured amounts plus its recorded spends.
    func verifyProfileUsage(_ tx: any SQLExecutor, into differences: inout [String]) async throws {
        let limit = Self.verifyDifferencesMax + 1
        let rows = try await tx.query(
            """
            SELECT k.profile_id, k.period_start_ms, COALESCE(u.used, 0) AS used, COALESCE(u.held, 0) AS held,
                COALESCE(h.used, 0) + COALESCE(s.used, 0) AS derived_used, COALESCE(h.held, 0) AS derived_held
            FROM (SELECT profile_id, period_start_ms FROM ledger_profile_usage
                  UNION SELECT profile_id, usage_period_ms FROM ledger_holds WHERE profile_id IS NOT NULL
                  UNION SELECT profile_id, period_start_ms FROM ledger_profile_spends) k
            LEFT JOIN ledger_profile_usage u ON u.profile_id = k.profile_id AND u.period_start_ms = k.period_start_ms
            LEFT JOIN (
                SELECT profile_id, usage_period_ms AS period, CAST(SUM(CASE WHEN status = 'pending' THEN amount ELSE 0 END) AS BIGINT) AS held,
                    CAST(SUM(CASE WHEN status = 'captured' THEN captured_amount ELSE 0 END) AS BIGINT) AS used
                FROM ledger_holds WHERE profile_id IS NOT NULL GROUP BY profile_id, usage_period_ms
            ) h ON h.profile_id = k.profile_id AND h.period = k.period_start_ms
            LEFT JOIN (
                SELECT profile_id, period_start_ms AS period, CAST(SUM(amount) AS BIGINT) AS used FROM ledger_profile_spends
                GROUP BY profile_id, period_start_ms
            ) s ON s.profile_id = k.profile_id AND s.period = k.period_start_ms
            WHERE COALESCE(u.used, 0) <> COALESCE(h.used, 0) + COALESCE(s.used, 0) OR COALESCE(u.held, 0) <> COALESCE(h.held, 0)
            ORDER BY k.profile_id, k.period_start_ms LIMIT ?
            """, [limit])
        for row in rows.prefix(Self.verifyDifferencesMax) {
            differences.append(
                "profile \(try row.string("profile_id")) period \(try row.int("period_start_ms")): usage \(try row.int("used")) used, "
                    + "\(try row.int("held")) held, but its holds and spends add up to \(try row.int("derived_used")) used, \(try row.int("derived_held")) held"
            )
        }
        if rows.count == limit { differences.append("more profile usage differs (the first \(Self.verifyDifferencesMax) are listed)") }
    }
}
