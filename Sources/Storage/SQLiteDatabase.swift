import Foundation
import Logging
import Synchronization
import Traces

/// The embedded engine: one SQLite file in WAL mode. One connection serves the process and an
/// in-process FIFO lock serializes its transactions (SQLite allows one writer at a time anyway);
/// `busy_timeout` plus bounded retries cover other processes on the same file, within the lock timeout
/// (`DATABASE_LOCK_TIMEOUT_SECONDS`, as on PostgreSQL): past it a transaction fails as ``StorageError/locked``. Each connection has its own
/// thread (``SQLiteThread``): a transaction runs there from BEGIN to COMMIT without a thread switch.
public final class SQLiteDatabase: Database {
    public let engine = Engine.sqlite
    let connection: SQLiteConnection
    let writerThread = SQLiteThread(name: "sqlite-writer")
    let gate = AsyncMutex()
    /// A second connection for reads outside transactions: in WAL mode readers never wait for the writer.
    let reader: SQLiteConnection?
    let readerThread: SQLiteThread?
    let readerGate = AsyncMutex()
    /// Read-only connections for ``quickQuery(_:_:logger:)``, used on the caller's thread, one caller at a time each.
    private let quickReaders: Mutex<QuickReaders>
    static let quickReaderCount = 2
    /// Held shared while the file is open, so `restore` never swaps it from under this process.
    private let fileLock: SQLiteFileLock?
    /// How long a transaction keeps trying for the write lock another process holds (nil: ``transactionAttemptsMax``
    /// tries of `busy_timeout` each); then it fails as ``StorageError/locked``.
    let lockWait: Duration?

    private struct QuickReaders: ~Copyable {
        var idle: [SQLiteConnection]
        var closed = false
    }

    init(
        connection: SQLiteConnection, reader: SQLiteConnection?, quickReaders: [SQLiteConnection] = [], fileLock: SQLiteFileLock? = nil,
        lockWait: Duration? = nil
    ) {
        (self.fileLock, self.lockWait) = (fileLock, lockWait)
        self.connection = connection
        self.reader = reader
        self.readerThread = reader == nil ? nil : SQLiteThread(name: "sqlite-reader")
        self.quickReaders = Mutex(QuickReaders(idle: quickReaders))
    }

    deinit {
        writerThread.stop()
        readerThread?.stop()
    }

    /// How much of the file the quick readers (``quickQuery(_:_:logger:)``) map into memory by default (`mmap_size`), in MiB.
    ///
    /// Each read connection keeps SQLite's default page cache (2 MiB), which at a hundred thousand users holds a small
    /// part of the pages the entitlement snapshot's dozen index lookups visit; every other page was a `read()` of 4 KiB
    /// from the kernel's cache. Mapped, a page is read in place. On a 378 MiB file (`scripts/bench-scale` at a tenth),
    /// entitlements went from 0.70 to 0.79 of the same requests on a small file (six alternating rounds, docs/performance.md).
    /// The mapped pages a connection has read count in the process's RSS (as file pages the kernel may drop, which it
    /// caches for `read()` as well), once per connection; so the longer reads on the other reader (history, audit pages,
    /// `ledger verify`) are not mapped. A file on a network filesystem should not be mapped (`SQLITE_MMAP_MIB=0`), and on
    /// a mapped file a disk's read error stops the process (SIGBUS) instead of failing the statement.
    public static let defaultMapMiB = 1024
    /// SQLite's own ceiling on Linux (`SQLITE_MAX_MMAP_SIZE`, 0x7fff0000 bytes): a larger setting is cut to it.
    public static let maximumMapMiB = 2047

    /// Opens (creating the file and its directory) `path`, or an in-memory database for ":memory:"; the quick readers
    /// map the first `mapMiB` MiB of the file (see ``defaultMapMiB``). A transaction waits up to `lockTimeoutSeconds` for
    /// the write lock another process holds (0: ``transactionAttemptsMax`` tries of 5 s), then fails as
    /// ``StorageError/locked``.
    public static func open(path: String, mapMiB: Int = defaultMapMiB, lockTimeoutSeconds: Int64 = 30, logger: Logger) async throws -> SQLiteDatabase
    {
        let lockWait: Duration? = lockTimeoutSeconds > 0 ? .seconds(lockTimeoutSeconds) : nil
        let busyMilliseconds = lockTimeoutSeconds > 0 ? min(5_000, lockTimeoutSeconds * 1_000) : 5_000
        if path != ":memory:" {
            let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        let connection = try SQLiteConnection(path: path)
        let fileLock = path == ":memory:" ? nil : SQLiteFileLock(path: path, exclusive: false)
        if path != ":memory:" && fileLock == nil {
            connection.close()
            throw StorageError.unavailable("\(path) is being restored; try again when that finishes")
        }
        _ = try connection.query("PRAGMA busy_timeout = \(busyMilliseconds)", [])
        if path != ":memory:" { try await switchToWAL(connection, path: path) }
        _ = try connection.query("PRAGMA synchronous = NORMAL", [])
        _ = try connection.query("PRAGMA foreign_keys = ON", [])
        guard path != ":memory:" else { return SQLiteDatabase(connection: connection, reader: nil) }
        func readOnly(mapMiB: Int) throws -> SQLiteConnection {
            let readOnly = try SQLiteConnection(path: path)
            _ = try readOnly.query("PRAGMA busy_timeout = 5000", [])
            _ = try readOnly.query("PRAGMA query_only = ON", [])
            _ = try readOnly.query("PRAGMA mmap_size = \(Int64(max(0, min(mapMiB, maximumMapMiB))) << 20)", [])
            return readOnly
        }
        return SQLiteDatabase(
            connection: connection, reader: try readOnly(mapMiB: 0),
            quickReaders: try (0..<quickReaderCount).map { _ in try readOnly(mapMiB: mapMiB) },
            fileLock: fileLock, lockWait: lockWait)
    }

    /// WAL mode is stored in the file, and switching to it needs the file to itself: a second process opening a new
    /// file at the same instant gets SQLITE_BUSY, or the old mode answered back, without the busy handler waiting.
    /// Left in rollback-journal mode, the two processes' transactions then refuse each other at once instead of
    /// waiting; so the switch is retried until the file reports WAL.
    static func switchToWAL(_ connection: SQLiteConnection, path: String) async throws {
        for _ in 0..<100 {
            do {
                if try connection.query("PRAGMA journal_mode = WAL", []).first?.string("journal_mode").lowercased() == "wal" { return }
            } catch let error as SQLiteFailure where error.isBusy {}
            try await Task.sleep(for: .milliseconds(Int.random(in: 10...30)))
        }
        throw StorageError.unavailable("\(path) could not be switched to WAL mode (another process holds it)")
    }

    /// Closes both connections; later calls do nothing, and later queries answer `unavailable`.
    public func close() async throws {
        try await onWriter {
            try await self.readerGate.withLock {
                self.reader?.close()
                self.connection.close()
            }
            self.fileLock?.release()
        }
        // Idle quick readers close now; one in use closes when it is handed back.
        quickReaders.withLock { readers in
            readers.closed = true
            for reader in readers.idle { reader.close() }
            readers.idle.removeAll()
        }
    }

    /// Holds the writer lock on the writer's thread: everything `body` runs, statement after statement, stays there.
    private func onWriter<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        try await withTaskExecutorPreference(writerThread) {
            try await gate.withLock { try await StorageMetrics.using(StorageMetrics.sqliteInUse) { try await body() } }
        }
    }

    public func transaction<T: Sendable>(
        isolation: TransactionIsolation, logger: Logger, _ body: @escaping @Sendable (any SQLExecutor) async throws -> T
    ) async throws -> T {
        var attempt = 0
        let started = ContinuousClock.now
        while true {
            attempt += 1
            do {
                return try await onWriter {
                    let executor = SQLiteExecutor(connection: connection)
                    // IMMEDIATE takes the write lock up front, so two processes never deadlock on upgrade.
                    return try await executor.inTransaction(begin: "BEGIN IMMEDIATE") { try await body(executor) }
                }
            } catch let error as SQLiteFailure where error.isBusy {
                // Another process (this node's CLI, a second node on the same file) held the write lock for too long.
                guard attempt < transactionAttemptsMax, lockWait.map({ ContinuousClock.now - started < $0 }) ?? true else {
                    throw StorageError.locked
                }
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
        guard let reader, let readerThread else { return try await onWriter { try await body(SQLiteExecutor(connection: connection)) } }
        return try await withTaskExecutorPreference(readerThread) {
            try await readerGate.withLock {
                try await StorageMetrics.using(StorageMetrics.sqliteInUse) { try await body(SQLiteExecutor(connection: reader)) }
            }
        }
    }

    /// On the calling thread with an idle quick reader, synchronously (held for the statement only); on the reader thread
    /// when none is free. In WAL mode a reader does not wait for the writer, so the calling thread is not held up by writes.
    public func quickQuery(_ sql: String, _ binds: [any SQLBindable], logger: Logger) async throws -> [SQLRow] {
        let values = binds.map(\.sqlValue)
        guard let reader = quickReaders.withLock({ $0.idle.popLast() }) else {
            return try await withConnection(logger: logger) { try await $0.query(sql, values) }
        }
        defer {
            quickReaders.withLock { readers in
                if readers.closed { reader.close() } else { readers.idle.append(reader) }
            }
        }
        return try reader.query(sql, values)
    }

    public func ping(timeoutSeconds: Double, logger: Logger) async throws {
        _ = try await withConnection(logger: logger) { try await $0.query("SELECT 1 AS one") }
    }

    public func migrate(_ migrations: [Migration], logger: Logger) async throws -> [Migration] {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await onWriter {
                    let executor = SQLiteExecutor(connection: connection)
                    // EXCLUSIVE: a second process starting at once waits (busy_timeout), then sees them applied.
                    return try await executor.inTransaction(begin: "BEGIN EXCLUSIVE") {
                        try await MigrationRunner.apply(migrations, executor: executor, logger: logger, inTransaction: true)
                    }
                }
            } catch let error as SQLiteFailure where error.isBusy && attempt < transactionAttemptsMax {
                try await Task.sleep(for: .milliseconds(100 * attempt))
            }
        }
    }
}

struct SQLiteExecutor: SQLExecutor {
    let connection: SQLiteConnection
    var engine: Engine { .sqlite }

    @discardableResult
    func query(_ sql: String, _ binds: [any SQLBindable]) async throws -> [SQLRow] {
        guard Traces.enabled else { return try connection.query(sql, binds.map(\.sqlValue)) }
        return try await Traces.span("db.query", client: true, attributes: ["db.system.name": "sqlite", "db.query.text": String(sql.prefix(300))]) {
            try connection.query(sql, binds.map(\.sqlValue))
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
