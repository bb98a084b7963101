import Clock
import Foundation
import Logging
import Storage

/// What an idempotent write ended with, in the ledger's terms; the HTTP layer renders it, first time and on replay.
public enum IdempotentOutcome<Value: Sendable>: Sendable {
    case succeeded(Value)
    /// A ledger failure remembered as the answer (``LedgerError/isRemembered``).
    case failed(LedgerError)
    /// A record written before migration 0017 holds the HTTP answer that was sent; it is replayed as it was until it
    /// ages out (``IdempotencyStore/retentionDays``).
    case sentBefore(status: Int, body: String)
}

extension IdempotentOutcome: Equatable where Value: Equatable {}

/// An idempotent write's answer: what it ended with, and whether it was replayed from the record.
public struct IdempotentResult<Value: Sendable>: Sendable {
    public let outcome: IdempotentOutcome<Value>
    public let replayed: Bool
}

/// An idempotency record as stored: the request's fields (canonical JSON) and the outcome (`outcome_json`), or, for
/// records written before migration 0017, the HTTP status and body that were sent.
public struct IdempotencyRecord: Sendable, Equatable {
    public let requestJSON: String
    public let outcomeJSON: String?
    public let status: Int?
    public let responseJSON: String?

    /// A row with `request_json`, `outcome_json`, `status` and `response_json`.
    init(row: SQLRow) throws {
        requestJSON = try row.string("request_json")
        outcomeJSON = row.optionalString("outcome_json")
        status = row.optionalInt("status").map { Int($0) }
        responseJSON = row.optionalString("response_json")
    }
}

/// Idempotent writes, in one place: per (caller, `Idempotency-Key`), the first request runs and its outcome is stored in
/// the same transaction, remembered failures included (a retried `insufficient_tokens` never succeeds later); the same key
/// with the same request replays the stored outcome; with another request it is `idempotencyConflict` naming the
/// differing fields. Outcomes are stored in the ledger's terms (`StoredOutcome`), so what a replay sends is rendered by
/// today's HTTP layer. Records are kept ``retentionDays`` days. PostgreSQL's `ledger_spend_once` (migration 0017) reads
/// and writes the same records for one-statement spends (``answer(_:request:)``).
public struct IdempotencyStore: Sendable {
    public static let retentionDays = 35
    /// The longest key accepted, in bytes.
    public static let keyBytesMax = 255
    let clock: any TimeSource

    public init(clock: any TimeSource) { self.clock = clock }

    /// Runs `operation` at most once per (`caller`, `key`), in one transaction with its record. `request` maps each request
    /// field to its canonical JSON text. The operation runs inside a savepoint: a ``LedgerError`` it throws that is
    /// remembered (``LedgerError/isRemembered``) rolls its writes back and is stored as the outcome. `lane` names the rows
    /// the operation locks (``Ledger/lane(userID:)``): the process's requests for them take a connection a few at a time.
    public func run<T: Codable & Sendable>(
        _ database: any Database, caller: String, key: String, request: [String: String], lane: String, logger: Logger,
        _ operation: @escaping @Sendable (any SQLExecutor) async throws -> T
    ) async throws -> IdempotentResult<T> {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await database.transaction(lane: lane, logger: logger) { tx in
                    if let stored: IdempotentOutcome<T> = try await lookup(tx, caller: caller, key: key, request: request) {
                        return IdempotentResult(outcome: stored, replayed: true)
                    }
                    let outcome: IdempotentOutcome<T>
                    do {
                        outcome = try await savepoint(tx, operation)
                    } catch {
                        // While this request waited on the locks of a concurrent one with the same key, that one may
                        // have committed: its answer wins over whatever the wait made this one find (e.g. a cap it used).
                        if let stored: IdempotentOutcome<T> = try await committedMeanwhile(tx, caller: caller, key: key, request: request, error) {
                            return IdempotentResult(outcome: stored, replayed: true)
                        }
                        throw error
                    }
                    try await save(tx, caller: caller, key: key, request: request, outcome: outcome)
                    return IdempotentResult(outcome: outcome, replayed: false)
                }
            } catch StorageError.uniqueViolation where attempt < 3 {
                continue  // the same key raced in from another request: the next attempt replays it
            }
        }
    }

    /// The operation in a savepoint; a remembered ledger failure becomes the outcome. No RELEASE on success: COMMIT ends
    /// the savepoint too, and one round trip fewer is held under the ledger's row locks.
    func savepoint<T: Sendable>(_ tx: any SQLExecutor, _ operation: (any SQLExecutor) async throws -> T) async throws -> IdempotentOutcome<T> {
        try await tx.query("SAVEPOINT idempotent_operation")
        do {
            return .succeeded(try await operation(tx))
        } catch let error as LedgerError where error.isRemembered {
            try await tx.query("ROLLBACK TO SAVEPOINT idempotent_operation")
            return .failed(error)
        }
    }

    /// After the operation failed with `error`: the outcome a concurrent request with this key committed meanwhile, or
    /// nil (then `error` stands). The savepoint is rolled back first, so the lookup runs even after a failed statement;
    /// the same key with another request is still `idempotencyConflict`.
    func committedMeanwhile<T: Codable & Sendable>(
        _ tx: any SQLExecutor, caller: String, key: String, request: [String: String], _ error: any Error
    ) async throws -> IdempotentOutcome<T>? {
        do {
            try await tx.query("ROLLBACK TO SAVEPOINT idempotent_operation")
            return try await lookup(tx, caller: caller, key: key, request: request)
        } catch let conflict as LedgerError {
            throw conflict
        } catch {
            return nil
        }
    }

    /// The answer to a spend made in one statement (``Ledger/spendInOneStatement``); nil → run it the ordinary way.
    public static func answer(_ outcome: OneStatementSpend, request: [String: String]) throws -> IdempotentResult<LedgerResult>? {
        switch outcome {
        case .spent(let result): return IdempotentResult(outcome: .succeeded(result), replayed: false)
        case .stored(let record): return IdempotentResult(outcome: try replay(record, request: request), replayed: true)
        case .fallback: return nil
        }
    }

    /// Looks the key up (locking the record on PostgreSQL): nil when it is new, else its stored outcome; the key used with
    /// another request is `idempotencyConflict` naming the fields that differ.
    public func lookup<T: Codable & Sendable>(
        _ tx: any SQLExecutor, caller: String, key: String, request: [String: String]
    ) async throws
        -> IdempotentOutcome<T>?
    {
        guard
            let row = try await tx.first(
                "SELECT request_json, outcome_json, status, response_json FROM idempotency_records WHERE caller = ? AND idempotency_key = ?"
                    + tx.dialect.forUpdate, [caller, key])
        else { return nil }
        return try Self.replay(try IdempotencyRecord(row: row), request: request)
    }

    /// A stored record met again: the same request → its outcome; another one → `idempotencyConflict` naming the fields.
    public static func replay<T: Codable & Sendable>(_ record: IdempotencyRecord, request: [String: String]) throws -> IdempotentOutcome<T> {
        let stored = (try? JSONDecoder().decode([String: String].self, from: Data(record.requestJSON.utf8))) ?? [:]
        let differing = Set(stored.keys).union(request.keys).filter { stored[$0] != request[$0] }.sorted()
        guard differing.isEmpty else { throw LedgerError.idempotencyConflict(fields: differing) }
        if let outcome = record.outcomeJSON { return try StoredOutcome<T>.decode(outcome) }
        guard let status = record.status, let body = record.responseJSON else { throw StorageError.decoding(column: "outcome_json") }
        return .sentBefore(status: status, body: body)
    }

    /// The request's fields as stored (sorted keys), byte for byte what Foundation's `JSONEncoder` with `.sortedKeys`
    /// writes, so the stored text stays the same across builds (a retry is matched by decoding it, in `replay`). Fields
    /// whose keys are ASCII letters and whose values are printable ASCII (nearly every request) are written directly;
    /// anything else takes Foundation's encoder (`FastEncodingTests` holds both equal over random fields).
    public static func requestJSON(_ request: [String: String]) throws -> String {
        if let plain = plainRequestJSON(request) { return plain }
        return try foundationRequestJSON(request)
    }

    /// The fast path: nil when a key or a value needs more of Foundation's rules (control or non-ASCII characters, or keys whose order might differ).
    static func plainRequestJSON(_ request: [String: String]) -> String? {
        let keys = request.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        var previous: String?
        var length = 2
        for key in keys {
            guard !key.isEmpty, key.utf8.allSatisfy({ (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) }) else { return nil }
            // Foundation's sort and the bytes' order agree when they agree ignoring case too.
            let folded = key.lowercased()
            if let previous, !previous.utf8.lexicographicallyPrecedes(folded.utf8) { return nil }
            previous = folded
            guard let value = request[key], value.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else { return nil }
            length += key.utf8.count + value.utf8.count + 8
        }
        var out = "{"
        out.reserveCapacity(length)
        for (index, key) in keys.enumerated() {
            if index > 0 { out += "," }
            out += "\""
            out += key
            out += "\":\""
            let value = request[key] ?? ""
            guard value.utf8.contains(where: { $0 == 0x22 || $0 == 0x5C || $0 == 0x2F }) else {
                out += value
                out += "\""
                continue
            }
            for scalar in value.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "/": out += "\\/"
                default: out.unicodeScalars.append(scalar)
                }
            }
            out += "\""
        }
        out += "}"
        return out
    }

    /// `requestJSON` without the fast path.
    static func foundationRequestJSON(_ request: [String: String]) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return String(decoding: try encoder.encode(request), as: UTF8.self)
    }

    public func save<T: Codable & Sendable>(
        _ tx: any SQLExecutor, caller: String, key: String, request: [String: String], outcome: IdempotentOutcome<T>
    ) async throws {
        try await tx.query(
            "INSERT INTO idempotency_records (caller, idempotency_key, request_json, outcome_json, created_at_ms) VALUES (?, ?, ?, ?, ?)",
            [caller, key, try Self.requestJSON(request), try StoredOutcome<T>.encode(outcome), clock.now()])
    }

    /// Deletes records older than the retention period; returns how many.
    public func purge(_ tx: any SQLExecutor, limit: Int) async throws -> Int {
        let cutoff = clock.now().addingTimeInterval(-Double(Self.retentionDays) * 86400)
        return try await tx.query(
            """
            DELETE FROM idempotency_records WHERE (caller, idempotency_key) IN
                (SELECT caller, idempotency_key FROM idempotency_records WHERE created_at_ms < ? LIMIT ?) RETURNING caller
            """, [cutoff, limit]
        ).count
    }
}

extension LedgerError {
    /// Failures stored as the answer of an idempotent write (replayed on retry). Not an unknown user: the id may be
    /// one that a client has not created yet, and 404 is no answer to remember.
    var isRemembered: Bool {
        switch self {
        case .insufficientTokens, .holdNotFound, .holdResolved, .invalid, .transferNotFound, .alreadyReversed, .notReversible: true
        // Not remembered: the same key may capture once the owner approves.
        case .userNotFound, .idempotencyConflict, .allowanceExceeded, .holdAwaitingApproval: false
        }
    }
}
