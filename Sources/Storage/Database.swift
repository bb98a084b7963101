import Foundation
import Logging

/// The two storage engines. PostgreSQL is the production / scale-out engine; SQLite the embedded default.
public enum Engine: String, Sendable, CaseIterable, CustomStringConvertible {
    case sqlite
    case postgres
    public var description: String { rawValue }
}

/// Runs statements inside one transaction (or one connection).
///
/// SQL is written once with `?` placeholders; the PostgreSQL driver rewrites them to `$1…$n`.
/// Use ``SQLDialect`` for the few real differences (row locks).
public protocol SQLExecutor: Sendable {
    var engine: Engine { get }
    /// Runs one statement and returns its rows (use `RETURNING` to learn what a write touched).
    @discardableResult
    func query(_ sql: String, _ binds: [any SQLBindable]) async throws -> [SQLRow]
    /// Ends a transaction that failed with `error`. The default sends ROLLBACK and ignores its outcome.
    func rollback(after error: any Error) async
    /// Returns once a write run outside a transaction (an implicit transaction) has committed. PostgreSQL answers a
    /// statement's rows before its implicit commit (the commit, with its WAL flush and any synchronous standby's
    /// confirmation, happens at the protocol's Sync): a caller that acknowledges on the rows alone could acknowledge a
    /// write a crash or a failover then loses. SQLite commits before it answers: nothing to wait for.
    func confirmImplicitCommit() async throws
}

extension SQLExecutor {
    @discardableResult
    public func query(_ sql: String) async throws -> [SQLRow] { try await query(sql, []) }
    /// The first row, or nil.
    public func first(_ sql: String, _ binds: [any SQLBindable] = []) async throws -> SQLRow? {
        try await query(sql, binds).first
    }
    public var dialect: SQLDialect { SQLDialect(engine: engine) }

    public func rollback(after error: any Error) async {
        _ = try? await query("ROLLBACK")
    }

    public func confirmImplicitCommit() async throws {}

    /// `begin`, then `body`, then COMMIT; ROLLBACK (and rethrow) when `body` throws.
    func inTransaction<T: Sendable>(begin: String, _ body: () async throws -> T) async throws -> T {
        try await query(begin)
        do {
            let result = try await body()
            try await query("COMMIT")
            return result
        } catch {
            await rollback(after: error)
            throw error
        }
    }
}

/// Isolation for a transaction. `serializable` is honoured on PostgreSQL; SQLite transactions are always
/// serializable (one writer at a time).
public enum TransactionIsolation: Sendable {
    case readCommitted
    case serializable
}

/// One storage interface for every module.
public protocol Database: Sendable {
    var engine: Engine { get }
    /// Runs `body` in one transaction, commits when it returns, rolls back when it throws.
    /// Serialization failures, deadlocks and SQLite busy errors are retried up to `maxAttempts` times;
    /// errors thrown by `body` reach the caller unwrapped.
    func transaction<T: Sendable>(
        isolation: TransactionIsolation,
        logger: Logger,
        _ body: @escaping @Sendable (any SQLExecutor) async throws -> T
    ) async throws -> T
    /// Runs `body` in a transaction that sees one consistent snapshot: on PostgreSQL REPEATABLE READ READ ONLY
    /// (never blocks writers); on SQLite the serialized writer transaction (measured faster than queueing every
    /// read on the single reader connection).
    func readTransaction<T: Sendable>(logger: Logger, _ body: @escaping @Sendable (any SQLExecutor) async throws -> T) async throws -> T
    /// Runs `body` on one connection without opening a transaction (single reads).
    func withConnection<T: Sendable>(logger: Logger, _ body: @escaping @Sendable (any SQLExecutor) async throws -> T) async throws -> T
    /// One short read-only statement (indexed lookups, never a scan), outside a transaction. SQLite runs it right on the
    /// calling thread with one of a few extra read-only connections when one is free, instead of queueing it on the reader
    /// thread (two thread switches, which were most of a cached read's cost); PostgreSQL as ``withConnection(logger:_:)``.
    func quickQuery(_ sql: String, _ binds: [any SQLBindable], logger: Logger) async throws -> [SQLRow]
    /// Checks that the database answers, within `timeoutSeconds`.
    func ping(timeoutSeconds: Double, logger: Logger) async throws
    /// Applies the embedded migrations (once across processes) and verifies applied checksums.
    func migrate(_ migrations: [Migration], logger: Logger) async throws -> [Migration]
    /// Releases the engine's connections (the PostgreSQL pool stops with its service instead).
    func close() async throws
}

extension Database {
    public func quickQuery(_ sql: String, _ binds: [any SQLBindable], logger: Logger) async throws -> [SQLRow] {
        let values = binds.map(\.sqlValue)
        return try await withConnection(logger: logger) { try await $0.query(sql, values) }
    }

    @discardableResult
    public func transaction<T: Sendable>(
        logger: Logger,
        _ body: @escaping @Sendable (any SQLExecutor) async throws -> T
    ) async throws -> T {
        try await transaction(isolation: .readCommitted, logger: logger, body)
    }
}

/// The small place where the engines' SQL differs.
public struct SQLDialect: Sendable {
    public let engine: Engine
    public init(engine: Engine) { self.engine = engine }
    /// Appended to a SELECT that must lock the rows it reads until commit (PostgreSQL). SQLite's
    /// `BEGIN IMMEDIATE` already holds the only write lock, so it needs nothing.
    public var forUpdate: String { engine == .postgres ? " FOR UPDATE" : "" }
    /// A row lock that conflicts with every update of the row but not with the key-share lock a row referencing it takes
    /// (a new session's `user_id`): PostgreSQL's `FOR NO KEY UPDATE`, the lock an `UPDATE` of non-key columns takes.
    public var forNoKeyUpdate: String { engine == .postgres ? " FOR NO KEY UPDATE" : "" }
    /// Holds the rows read against updates until the transaction ends (PostgreSQL; SQLite's writer already does).
    public var forShare: String { engine == .postgres ? " FOR SHARE" : "" }
    /// `column` compared byte by byte (PostgreSQL's `C` collation; SQLite's default), so that a range `>= prefix AND
    /// < prefix + U+10FFFF` holds exactly the values starting with `prefix`, and an index on this expression serves it.
    public func bytewise(_ column: String) -> String { engine == .postgres ? "(\(column) COLLATE \"C\")" : column }
    /// An aggregate joining `expression` over the group with `|` (NULL for no rows).
    public func joined(_ expression: String) -> String {
        engine == .postgres ? "string_agg(\(expression), '|')" : "group_concat(\(expression), '|')"
    }

    /// `column IN` the strings of one bind, ``list(_:)``: one SQL text whatever the list's length, so a hot statement is
    /// prepared once instead of once per length (`PreparedStatements` gives a family of lengths four slots). On
    /// PostgreSQL an `= ANY` of the array, which a generic plan looks up in an index (an `IN (SELECT …)` over the JSON
    /// was planned as a hash join over the whole table); SQLite searches its index for each value either way.
    public func isIn(_ column: String) -> String {
        engine == .postgres
            ? "\(column) = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST(? AS JSONB))))" : "\(column) IN (SELECT value FROM json_each(?))"
    }

    /// The bind of ``isIn(_:)``: the strings as a JSON array. A NUL is refused as in any text bind (PostgreSQL's `jsonb`
    /// cannot hold it either).
    public static func list(_ values: [String]) throws -> String {
        guard !values.contains(where: { $0.utf8.contains(0) }) else { throw StorageError.nulCharacter }
        return String(decoding: try JSONEncoder().encode(values), as: UTF8.self)
    }

    /// Rewrites `?` placeholders to `$n` for PostgreSQL, leaving quoted strings and comments alone.
    public static func numberedPlaceholders(_ sql: String) -> String {
        var out = ""
        out.reserveCapacity(sql.count + 16)
        var index = 0
        var inQuote = false
        var inComment = false
        var previous: Character = " "
        for ch in sql {
            if inComment {
                if ch == "\n" { inComment = false }
                out.append(ch)
            } else if inQuote {
                if ch == "'" { inQuote = false }
                out.append(ch)
            } else if ch == "'" {
                inQuote = true
                out.append(ch)
            } else if ch == "-" && previous == "-" {
                inComment = true
                out.append(ch)
            } else if ch == "?" {
                index += 1
                out.append("$\(index)")
            } else {
                out.append(ch)
            }
            previous = ch
        }
        return out
    }
}

/// How many times a transaction is retried on serialization failure / busy before the error surfaces.
public let transactionAttemptsMax = 8
