import Foundation
import Logging
import Storage

/// What an idempotency record says about a request.
public enum IdempotencyOutcome: Sendable, Equatable {
    /// The same request ran before: replay its stored status and body.
    case replay(status: Int, body: String)
    /// The key was used with a different request; these fields differ.
    case conflict(fields: [String])
}

/// The answer to an idempotent write: its status and JSON body, and whether it was replayed from the record.
public struct IdempotentAnswer: Sendable, Equatable {
    public let status: Int
    public let body: String
    public let replayed: Bool
}

/// Idempotent writes, in one place: per (caller, `Idempotency-Key`), the first request runs and its answer is stored in
/// the same transaction, failures included (a retried `insufficient_tokens` never succeeds later); the same key with the
/// same request replays the stored answer; with another request it is `idempotencyConflict` naming the differing fields.
/// Records are kept ``retentionDays`` days. PostgreSQL's `ledger_spend_once` (migration 0008) reads and writes the same
/// records for one-statement spends (``answer(_:successStatus:request:)``).
public struct IdempotencyStore: Sendable {
    public static let retentionDays = 35
    /// The longest key accepted, in bytes.
    public static let keyBytesMax = 255
    let clock: any TimeSource

    public init(clock: any TimeSource) { self.clock = clock }

    /// Runs `operation` at most once per (`caller`, `key`), in one transaction with its record. `request` maps each request
    /// field to its canonical JSON text. The operation runs inside a savepoint: a ``LedgerError`` it throws (other than
    /// `userNotFound`, which is not remembered) rolls its writes back and is stored as the answer `failure` renders.
    public func run<T: Sendable>(
        _ database: any Database, caller: String, key: String, request: [String: String], successStatus: Int, logger: Logger,
        encode: @escaping @Sendable (T) throws -> String, failure: @escaping @Sendable (LedgerError) -> (status: Int, body: String),
        _ operation: @escaping @Sendable (any SQLExecutor) async throws -> T
    ) async throws -> IdempotentAnswer {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await database.transaction(logger: logger) { tx in
                    switch try await lookup(tx, caller: caller, key: key, request: request) {
                    case .replay(let status, let body): return IdempotentAnswer(status: status, body: body, replayed: true)
                    case .conflict(let differing): throw LedgerError.idempotencyConflict(fields: differing)
                    case nil: break
                    }
                    let (status, body) = try await savepoint(tx, successStatus: successStatus, encode: encode, failure: failure, operation)
                    try await save(tx, caller: caller, key: key, request: request, status: status, body: body)
                    return IdempotentAnswer(status: status, body: body, replayed: false)
                }
            } catch StorageError.uniqueViolation where attempt < 3 {
                continue  // the same key raced in from another request: the next attempt replays it
            }
        }
    }

    /// The operation in a savepoint; a remembered ledger failure becomes the answer. No RELEASE on success: COMMIT ends
    /// the savepoint too, and one round trip fewer is held under the ledger's row locks.
    func savepoint<T: Sendable>(
        _ tx: any SQLExecutor, successStatus: Int, encode: (T) throws -> String, failure: (LedgerError) -> (status: Int, body: String),
        _ operation: (any SQLExecutor) async throws -> T
    ) async throws -> (Int, String) {
        try await tx.query("SAVEPOINT idempotent_operation")
        do {
            return (successStatus, try encode(try await operation(tx)))
        } catch let error as LedgerError where error.isRemembered {
            try await tx.query("ROLLBACK TO SAVEPOINT idempotent_operation")
            return failure(error)
        }
    }

    /// The answer to a spend made in one statement (``Ledger/spendInOneStatement``); nil → run it the ordinary way.
    public static func answer(_ outcome: OneStatementSpend, successStatus: Int, request: [String: String]) throws -> IdempotentAnswer? {
        switch outcome {
        case .spent(let body, _): return IdempotentAnswer(status: successStatus, body: body, replayed: false)
        case .stored(let status, let body, let storedRequest):
            if case .conflict(let differing) = Self.outcome(storedRequestJSON: storedRequest, status: status, body: body, request: request) {
                throw LedgerError.idempotencyConflict(fields: differing)
            }
            return IdempotentAnswer(status: status, body: body, replayed: true)
        case .fallback: return nil
        }
    }

    /// Looks the key up (locking the record on PostgreSQL). `request` maps each field to its canonical JSON text.
    public func lookup(_ tx: any SQLExecutor, caller: String, key: String, request: [String: String]) async throws -> IdempotencyOutcome? {
        guard
            let row = try await tx.first(
                "SELECT request_json, status, response_json FROM idempotency_records WHERE caller = ? AND idempotency_key = ?" + tx.dialect.forUpdate,
                [caller, key])
        else { return nil }
        return Self.outcome(
            storedRequestJSON: try row.string("request_json"), status: Int(try row.int("status")),
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
        case .userNotFound, .idempotencyConflict: false
        }
    }
}
