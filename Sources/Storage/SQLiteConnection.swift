import CSQLiteSupport
import Foundation
import VaporCSQLite

/// An error from libsqlite3: the extended result code and SQLite's message.
public struct SQLiteFailure: Error, CustomStringConvertible, Sendable {
    public let code: Int32
    public let message: String
    public var description: String { "SQLite error \(code): \(message)" }
    /// SQLITE_BUSY or SQLITE_LOCKED (any extended form): another connection holds the lock; worth retrying.
    public var isBusy: Bool { code & 0xff == 5 || code & 0xff == 6 }
    var isInterrupt: Bool { code & 0xff == 9 }
    /// SQLITE_CONSTRAINT_UNIQUE or SQLITE_CONSTRAINT_PRIMARYKEY.
    var isUniqueViolation: Bool { code == 2067 || code == 1555 }
}

/// One libsqlite3 connection used synchronously, with its prepared statements cached by SQL text.
///
/// sqlite-nio runs every statement on a thread pool and resumes the caller on an event loop: three thread
/// switches per statement, which was most of a spend's cost (about 12 statements). Here a whole transaction runs
/// on the connection's own thread (``SQLiteThread``) and each statement is a plain function call. The SQLite
/// library is the one sqlite-nio vendors (its `sqlite_nio_`-prefixed C API).
final class SQLiteConnection: @unchecked Sendable {
    private var handle: OpaquePointer?
    /// Prepared statements by SQL text; reset after each use. Only touched by the connection's holder.
    private var statements: [String: OpaquePointer] = [:]
    /// The column names of each cached statement, with the re-prepare count they were read at (a re-prepare after a
    /// schema change may change them).
    private var columns: [OpaquePointer: (columns: SQLColumns, prepares: Int32)] = [:]
    static let statementCacheMax = 512
    private static let initialized: Void = { _ = sqlite_nio_sqlite3_initialize() }()
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    init(path: String) throws {
        _ = Self.initialized
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_CREATE | SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_URI | SQLITE_OPEN_EXRESCODE
        let rc = sqlite_nio_sqlite3_open_v2(path, &handle, flags, nil)
        guard rc == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite_nio_sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite_nio_sqlite3_close(handle)
            throw SQLiteFailure(code: rc, message: "cannot open \(path): \(message)")
        }
        // Plans never depend on bound values, so a cached statement is never re-prepared because "now" changed.
        let qpsg = as_sqlite_enable_qpsg(UnsafeMutableRawPointer(handle))
        guard qpsg == SQLITE_OK else {
            sqlite_nio_sqlite3_close(handle)
            throw SQLiteFailure(code: qpsg, message: "cannot enable the query planner stability guarantee")
        }
        self.handle = handle
    }

    deinit { close() }

    var isClosed: Bool { handle == nil }

    /// Makes the statement running on this connection stop with SQLITE_INTERRUPT (any thread may call it while the
    /// connection is open).
    func interrupt() {
        if let handle { sqlite_nio_sqlite3_interrupt(handle) }
    }

    func close() {
        for statement in statements.values { sqlite_nio_sqlite3_finalize(statement) }
        statements.removeAll()
        columns.removeAll()
        if let handle { sqlite_nio_sqlite3_close_v2(handle) }
        handle = nil
    }

    /// Runs one statement and returns its rows.
    func query(_ sql: String, _ binds: [SQLValue]) throws -> [SQLRow] {
        guard let handle else { throw StorageError.unavailable("the SQLite database is closed") }
        guard let statement = try prepared(sql, handle) else { return [] }
        defer {
            sqlite_nio_sqlite3_reset(statement)
            sqlite_nio_sqlite3_clear_bindings(statement)
        }
        for (index, value) in binds.enumerated() {
            let position = Int32(index + 1)
            let rc: Int32
            switch value {
            case .null: rc = sqlite_nio_sqlite3_bind_null(statement, position)
            case .int(let v): rc = sqlite_nio_sqlite3_bind_int64(statement, position, v)
            case .double(let v): rc = sqlite_nio_sqlite3_bind_double(statement, position, v)
            case .bool(let v): rc = sqlite_nio_sqlite3_bind_int64(statement, position, v ? 1 : 0)
            case .text(let v):
                // The same rule as PostgreSQL (which cannot store NUL), so both engines accept the same input.
                if v.utf8.contains(0) { throw StorageError.nulCharacter }
                rc = sqlite_nio_sqlite3_bind_text64(statement, position, v, UInt64(v.utf8.count), Self.transient, UInt8(SQLITE_UTF8))
            case .bytes(let v):
                rc =
                    v.isEmpty
                    ? sqlite_nio_sqlite3_bind_zeroblob(statement, position, 0)
                    : v.withUnsafeBytes { sqlite_nio_sqlite3_bind_blob64(statement, position, $0.baseAddress, UInt64($0.count), Self.transient) }
            }
            guard rc == SQLITE_OK else { throw failure(rc, handle) }
        }
        var shared: SQLColumns?
        var rows: [SQLRow] = []
        while true {
            // The first step may re-prepare the statement (after a schema change), so its columns are read after it.
            let rc = sqlite_nio_sqlite3_step(statement)
            if rc == SQLITE_DONE { break }
            guard rc == SQLITE_ROW else { throw failure(rc, handle) }
            let names = shared ?? columns(of: statement, count: sqlite_nio_sqlite3_column_count(statement))
            shared = names
            rows.append(SQLRow(columns: names, cells: (0..<Int32(names.names.count)).map { Self.value(statement, $0) }))
        }
        return rows
    }

    private func columns(of statement: OpaquePointer, count: Int32) -> SQLColumns {
        let prepares = sqlite_nio_sqlite3_stmt_status(statement, SQLITE_STMTSTATUS_REPREPARE, 0)
        if let cached = columns[statement], cached.prepares == prepares, cached.columns.names.count == Int(count) { return cached.columns }
        let made = SQLColumns((0..<count).map { String(cString: sqlite_nio_sqlite3_column_name(statement, $0)) })
        columns[statement] = (made, prepares)
        return made
    }

    private func prepared(_ sql: String, _ handle: OpaquePointer) throws -> OpaquePointer? {
        if let statement = statements[sql] { return statement }
        var statement: OpaquePointer?
        let rc = sqlite_nio_sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard rc == SQLITE_OK else { throw failure(rc, handle) }
        guard let statement else { return nil }  // only whitespace or comments
        if statements.count >= Self.statementCacheMax {
            for old in statements.values { sqlite_nio_sqlite3_finalize(old) }
            statements.removeAll()
            columns.removeAll()
        }
        statements[sql] = statement
        return statement
    }

    /// How many times SQLite re-prepared the cached statement for `sql` (0 when it is not cached); for tests.
    func reprepareCount(_ sql: String) -> Int32 {
        statements[sql].map { sqlite_nio_sqlite3_stmt_status($0, SQLITE_STMTSTATUS_REPREPARE, 0) } ?? 0
    }

    private func failure(_ rc: Int32, _ handle: OpaquePointer) -> any Error {
        let error = SQLiteFailure(code: sqlite_nio_sqlite3_extended_errcode(handle), message: String(cString: sqlite_nio_sqlite3_errmsg(handle)))
        let failure = error.code & 0xff == rc & 0xff ? error : SQLiteFailure(code: rc, message: error.message)
        return failure.isUniqueViolation ? StorageError.uniqueViolation(failure.message) : failure
    }

    private static func value(_ statement: OpaquePointer, _ column: Int32) -> SQLValue {
        switch sqlite_nio_sqlite3_column_type(statement, column) {
        case SQLITE_INTEGER: return .int(sqlite_nio_sqlite3_column_int64(statement, column))
        case SQLITE_FLOAT: return .double(sqlite_nio_sqlite3_column_double(statement, column))
        case SQLITE_TEXT:
            let count = Int(sqlite_nio_sqlite3_column_bytes(statement, column))
            guard let text = sqlite_nio_sqlite3_column_text(statement, column) else { return .text("") }
            return .text(String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self))
        case SQLITE_BLOB:
            let count = Int(sqlite_nio_sqlite3_column_bytes(statement, column))
            guard count > 0, let blob = sqlite_nio_sqlite3_column_blob(statement, column) else { return .bytes([]) }
            return .bytes(Array(UnsafeRawBufferPointer(start: blob, count: count)))
        default: return .null
        }
    }
}

/// One OS thread that runs the jobs of every task that prefers it (`withTaskExecutorPreference`): a transaction's
/// statements then run back to back on this thread, entered and left once instead of once per statement.
final class SQLiteThread: TaskExecutor, @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var stopped = false

    init(name: String) {
        let thread = Thread { [self] in run() }
        thread.name = name
        thread.start()
    }

    func enqueue(_ job: UnownedJob) {
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Ends the thread once its queued jobs have run.
    func stop() {
        condition.lock()
        stopped = true
        condition.signal()
        condition.unlock()
    }

    private func run() {
        var batch: [UnownedJob] = []
        while true {
            condition.lock()
            while jobs.isEmpty && !stopped { condition.wait() }
            if jobs.isEmpty && stopped {
                condition.unlock()
                return
            }
            swap(&batch, &jobs)
            condition.unlock()
            for job in batch { job.runSynchronously(on: asUnownedTaskExecutor()) }
            batch.removeAll(keepingCapacity: true)
        }
    }
}
