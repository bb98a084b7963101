import Foundation
import Storage

extension Ledger {
    /// Recomputes every balance from the transfers and checks the invariants: the ledger sums to zero; every
    /// stored user balance equals the sum of its transfers and is not negative; the holds account equals the
    /// pending holds; each user's bonus balance equals the remainder of its lots; each hold's parts add up.
    public func verify(_ tx: any SQLExecutor) async throws -> VerifyReport {
        var differences: [String] = []
        let derivedRows = try await tx.query(
            """
            SELECT account_id, CAST(SUM(delta) AS BIGINT) AS derived FROM (
                SELECT credit_account_id AS account_id, amount AS delta FROM ledger_transfers
                UNION ALL SELECT debit_account_id AS account_id, -amount AS delta FROM ledger_transfers) movements
            GROUP BY account_id
            """)
        var derived: [String: Int64] = [:]
        for row in derivedRows { derived[try row.string("account_id")] = try row.int("derived") }
        let sum = derived.values.reduce(0, +)
        if sum != 0 { differences.append("transfers do not balance: the accounts sum to \(sum), not 0") }
        let accounts = try await tx.query("SELECT id, user_id, bucket, balance FROM ledger_accounts ORDER BY id")
        var bonusByUser: [String: Int64] = [:]
        for account in accounts {
            let id = try account.string("id")
            guard account.optionalString("user_id") != nil else { continue }
            let stored = try account.int("balance")
            let computed = derived[id] ?? 0
            if stored != computed { differences.append("\(id): stored balance \(stored) but transfers sum to \(computed)") }
            if stored < 0 { differences.append("\(id): negative balance \(stored)") }
            if try account.string("bucket") == Bucket.bonus.rawValue { bonusByUser[try account.string("user_id")] = stored }
        }
        let pending =
            try await tx.first("SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT) AS total FROM ledger_holds WHERE status = 'pending'")?
            .optionalInt("total") ?? 0
        if (derived[Self.holds] ?? 0) != pending {
            differences.append("holds account holds \(derived[Self.holds] ?? 0) but pending holds add up to \(pending)")
        }
        let lots = try await tx.query("SELECT user_id, CAST(SUM(remaining) AS BIGINT) AS remaining FROM ledger_lots GROUP BY user_id")
        var lotsByUser: [String: Int64] = [:]
        for row in lots { lotsByUser[try row.string("user_id")] = try row.int("remaining") }
        for user in Set(bonusByUser.keys).union(lotsByUser.keys).sorted() where (bonusByUser[user] ?? 0) != (lotsByUser[user] ?? 0) {
            differences.append("user \(user): bonus balance \(bonusByUser[user] ?? 0) but its lots hold \(lotsByUser[user] ?? 0)")
        }
        let badHolds = try await tx.query(
            """
            SELECT h.id, h.amount, CAST(COALESCE(SUM(p.amount), 0) AS BIGINT) AS parts FROM ledger_holds h
            LEFT JOIN ledger_hold_parts p ON p.hold_id = h.id GROUP BY h.id, h.amount HAVING COALESCE(SUM(p.amount), 0) <> h.amount
            """)
        for hold in badHolds {
            differences.append("hold \(try hold.string("id")): amount \(try hold.int("amount")) but parts add up to \(try hold.int("parts"))")
        }
        let transfers = try await tx.first("SELECT COUNT(*) AS n FROM ledger_transfers")?.optionalInt("n") ?? 0
        return VerifyReport(ok: differences.isEmpty, accountsChecked: accounts.count, transfersChecked: Int(transfers), differences: differences)
    }
}
