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
        let pending = try await tx.first("SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT) AS total FROM ledger_holds WHERE status = 'pending'")?
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
        for hold in badHolds { differences.append("hold \(try hold.string("id")): amount \(try hold.int("amount")) but parts add up to \(try hold.int("parts"))") }
        let transfers = try await tx.first("SELECT COUNT(*) AS n FROM ledger_transfers")?.optionalInt("n") ?? 0
        return VerifyReport(ok: differences.isEmpty, accountsChecked: accounts.count, transfersChecked: Int(transfers), differences: differences)
    }
}

/// What an idempotency record says about a request.
public enum IdempotencyOutcome: Sendable, Equatable {
    /// The same request ran before: replay its stored status and body.
    case replay(status: Int, body: String)
    /// The key was used with a different request; these fields differ.
    case conflict(fields: [String])
}

/// Per-caller idempotency records: same key and body → the stored response (failures included); same key,
/// other body → a conflict naming the differing fields. Kept at least 30 days.
public struct IdempotencyStore: Sendable {
    public static let retentionDays = 35
    let clock: any TimeSource

    public init(clock: any TimeSource) { self.clock = clock }

    /// Looks the key up (locking the record on PostgreSQL). `request` maps each field to its canonical JSON text.
    public func lookup(_ tx: any SQLExecutor, caller: String, key: String, request: [String: String]) async throws -> IdempotencyOutcome? {
        guard
            let row = try await tx.first(
                "SELECT request_json, status, response_json FROM idempotency_records WHERE caller = ? AND idempotency_key = ?" + tx.dialect.forUpdate,
                [caller, key])
        else { return nil }
        return Self.outcome(storedRequestJSON: try row.string("request_json"), status: Int(try row.int("status")),
                            body: try row.string("response_json"), request: request)
    }

    /// A stored record met again: the same request → replay; another one → a conflict naming the fields.
    public static func outcome(storedRequestJSON: String, status: Int, body: String, request: [String: String]) -> IdempotencyOutcome {
        let stored = (try? JSONDecoder().decode([String: String].self, from: Data(storedRequestJSON.utf8))) ?? [:]
        let differing = Set(stored.keys).union(request.keys).filter { stored[$0] != request[$0] }.sorted()
        if !differing.isEmpty { return .conflict(fields: differing) }
        return .replay(status: status, body: body)
    }

    /// The request's fields as stored (sorted keys).
    public static func requestJSON(_ request: [String: String]) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return String(decoding: try encoder.encode(request), as: UTF8.self)
    }

    public func save(_ tx: any SQLExecutor, caller: String, key: String, request: [String: String], status: Int, body: String) async throws {
        try await tx.query(
            "INSERT INTO idempotency_records (caller, idempotency_key, request_json, status, response_json, created_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
            [caller, key, try Self.requestJSON(request), status, body, clock.now()])
    }

    /// Deletes records older than the retention period; returns how many.
    public func purge(_ tx: any SQLExecutor, limit: Int) async throws -> Int {
        let cutoff = clock.now().addingTimeInterval(-Double(Self.retentionDays) * 86400)
        return try await tx.query(
            """
            DELETE FROM idempotency_records WHERE (caller, idempotency_key) IN
                (SELECT caller, idempotency_key FROM idempotency_records WHERE created_at_ms < ? LIMIT ?) RETURNING caller
            """, [cutoff, limit]).count
    }
}

/// A database lease so that one node at a time runs a background job.
public struct JobLease: Sendable {
    public let name: String
    public let holder: String
    public let ttlSeconds: Double

    public init(name: String, holder: String, ttlSeconds: Double) {
        self.name = name
        self.holder = holder
        self.ttlSeconds = ttlSeconds
    }

    /// Takes or renews the lease; true when this holder has it until now + ttl.
    public func acquire(_ tx: any SQLExecutor, now: Date) async throws -> Bool {
        let rows = try await tx.query(
            """
            INSERT INTO job_leases (name, holder, expires_at_ms) VALUES (?, ?, ?)
            ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at_ms = excluded.expires_at_ms
                WHERE job_leases.holder = excluded.holder OR job_leases.expires_at_ms <= ?
            RETURNING holder
            """, [name, holder, now.addingTimeInterval(ttlSeconds), now])
        return rows.first?.optionalString("holder") == holder
    }
}
