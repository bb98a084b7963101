import Foundation
import Logging
import NIOCore
import SQLiteNIO

/// The embedded engine: one SQLite file in WAL mode. One connection serves the process and an
/// in-process FIFO lock serializes its transactions (SQLite allows one writer at a time anyway);
/// `busy_timeout` plus bounded retries cover other processes on the same file.
public final class SQLiteDatabase: Database {
    public let engine = Engine.sqlite
    let connection: SQLiteConnection
    let gate = AsyncMutex()
    /// A second connection for reads outside transactions: in WAL mode readers never wait for the writer.
    let reader: SQLiteConnection?
    let readerGate = AsyncMutex()

    init(connection: SQLiteConnection, reader: SQLiteConnection?) {
        self.connection = connection
        self.reader = reader
    }

    /// Opens (creating the file and its directory) `path`, or an in-memory database for ":memory:".
    public static func open(path: String, logger: Logger) async throws -> SQLiteDatabase {
        let storage: SQLiteConnection.Storage
        if path == ":memory:" {
            storage = .memory
        } else {
            let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            storage = .file(path: path)
        }
        let connection = try await SQLiteConnection.open(storage: storage, logger: logger)
        _ = try await connection.query("PRAGMA busy_timeout = 5000")
        if path != ":memory:" { _ = try await connection.query("PRAGMA journal_mode = WAL") }
        _ = try await connection.query("PRAGMA synchronous = NORMAL")
        _ = try await connection.query("PRAGMA foreign_keys = ON")
        var reader: SQLiteConnection?
        if path != ":memory:" {
            let readOnly = try await SQLiteConnection.open(storage: storage, logger: logger)
            _ = try await readOnly.query("PRAGMA busy_timeout = 5000")
            _ = try await readOnly.query("PRAGMA query_only = ON")
            reader = readOnly
        }
        return SQLiteDatabase(connection: connection, reader: reader)
    }

    private let closed = ManagedAtomicBool()

    /// Closes the connection once; later calls do nothing. Runs in its own task so that a cancelled
    /// caller (a service group torn down without a graceful shutdown) still closes the file.
    public func close() async throws {
        let connection = self.connection
        let reader = self.reader
        let closed = self.closed
        let gate = self.gate
        let readerGate = self.readerGate
        try await Task {
            try await gate.withLock {
                try await readerGate.withLock {
                    guard !closed.load() else { return }
                    try await reader?.close()
                    try await connection.close()
                    closed.store(true)
                }
            }
        }.value
    }

    public func transaction<T: Sendable>(
        isolation: TransactionIsolation, logger: Logger, _ body: @escaping @Sendable (any SQLExecutor) async throws -> T
    ) async throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await gate.withLock {
                    try await StorageMetrics.using(StorageMetrics.sqliteInUse) {
                        let executor = SQLiteExecutor(connection: connection)
                        // IMMEDIATE takes the write lock up front, so two processes never deadlock on upgrade.
                        return try await executor.inTransaction(begin: "BEGIN IMMEDIATE") { try await body(executor) }
                    }
                }
            } catch let error as SQLiteError where Self.isBusy(error) && attempt < transactionAttemptsMax {
                logger.debug("retrying busy SQLite transaction", metadata: ["attempt": "\(attempt)"])
                try await Task.sleep(for: .milliseconds(Int.random(in: 5...(10 << min(attempt, 5)))))
            }
        }
    }

    public func readTransaction<T: Sendable>(logger: Logger, _ body: @escaping @Sendable (any SQLExecutor) async throws -> T) async throws -> T {
        // SQLite: the writer connection's IMMEDIATE transaction is one consistent snapshot too, and spreading
        // reads over both connections measured faster than queueing them all on the reader (2 → 1 connection).
        try await transaction(logger: logger, body)
    }

    /// Reads go to the reader connection (a consistent snapshot per statement; never blocked by the writer).
    public func withConnection<T: Sendable>(logger: Logger, _ body: @escaping @Sendable (any SQLExecutor) async throws -> T) async throws -> T {
        guard let reader else { return try await gate.withLock { try await body(SQLiteExecutor(connection: connection)) } }
        return try await readerGate.withLock {
            try await StorageMetrics.using(StorageMetrics.sqliteInUse) { try await body(SQLiteExecutor(connection: reader)) }
        }
    }

    public func ping(timeoutSeconds: Double, logger: Logger) async throws {
        _ = try await withConnection(logger: logger) { try await $0.query("SELECT 1 AS one") }
    }

    public func migrate(_ migrations: [Migration], logger: Logger) async throws -> [Migration] {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await gate.withLock {
                    let executor = SQLiteExecutor(connection: connection)
                    // EXCLUSIVE: a second process starting at once waits (busy_timeout), then sees them applied.
                    return try await executor.inTransaction(begin: "BEGIN EXCLUSIVE") {
                        try await MigrationRunner.apply(migrations, executor: executor, logger: logger, inTransaction: true)
                    }
                }
            } catch let error as SQLiteError where Self.isBusy(error) && attempt < transactionAttemptsMax {
                try await Task.sleep(for: .milliseconds(100 * attempt))
            }
        }
    }

    static func isBusy(_ error: SQLiteError) -> Bool {
        switch error.reason {
        case .busy, .locked, .busyTimeout, .busyInRecovery, .busyInSnapshot, .lockedBySharedCache: true
        default: false
        }
    }
}

struct SQLiteExecutor: SQLExecutor {
    let connection: SQLiteConnection
    var engine: Engine { .sqlite }

    @discardableResult
    func query(_ sql: String, _ binds: [any SQLBindable]) async throws -> [SQLRow] {
        let data: [SQLiteData] = try binds.map {
            switch $0.sqlValue {
            case .null: .null
            case .int(let v): .integer(numericCast(v))
            case .double(let v): .float(v)
            case .text(let v):
                // The same rule as PostgreSQL (which cannot store NUL), so both engines accept the same input.
                if v.utf8.contains(0) { throw StorageError.nulCharacter } else { .text(v) }
            case .bool(let v): .integer(v ? 1 : 0)
            case .bytes(let v): .blob(ByteBuffer(bytes: v))
            }
        }
        do {
            let rows = try await connection.query(sql, data)
            return rows.map { row in
                var values: [String: SQLValue] = [:]
                for column in row.columns {
                    values[column.name] =
                        switch column.data {
                        case .null: .null
                        case .integer(let v): .int(Int64(v))
                        case .float(let v): .double(v)
                        case .text(let v): .text(v)
                        case .blob(let b): .bytes(Array(buffer: b))
                        }
                }
                return SQLRow(values)
            }
        } catch let error as SQLiteError {
            if case .constraint = error.reason, error.message.contains("UNIQUE") {
                throw StorageError.uniqueViolation(error.message)
            }
            if case .constraintUniqueFailed = error.reason { throw StorageError.uniqueViolation(error.message) }
            if case .constraintPrimaryKeyFailed = error.reason { throw StorageError.uniqueViolation(error.message) }
            throw error
        }
    }
}

/// A FIFO async lock: one holder at a time, waiters resume in arrival order.
public actor AsyncMutex {
    private var locked = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    public init() {}

    public func lock() async {
        if !locked {
            locked = true
            return
        }
        await withCheckedContinuation { waiters.append($0) }
    }

    public func unlock() {
        if waiters.isEmpty { locked = false } else { waiters.removeFirst().resume() }
    }

    public nonisolated func withLock<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        await lock()
        do {
            let result = try await body()
            await unlock()
            return result
        } catch {
            await unlock()
            throw error
        }
    }
}
