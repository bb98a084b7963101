import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PostgresNIO
import Synchronization
import Traces

/// PostgreSQL through a ``PostgresPool`` per host (``PostgresHosts``), which the app runs as a service.
public final class PostgresDatabase: Database {
    public let engine = Engine.postgres
    /// The servers of `DATABASE_URL` and which one is the primary (``PostgresHosts``).
    public let hosts: PostgresHosts
    /// How long to wait for a connection before answering `unavailable` (so an outage gives fast 503s).
    public let leaseTimeoutSeconds: Double
    /// Whether ``batchedStatement(sql:maxBatch:logger:loops:prepare:)`` is offered (it opens connections of its own).
    let offersBatchedStatements: Bool
    /// The batched statements made here; ``close()`` closes their connections.
    private let batched = Mutex<[@Sendable () async -> Void]>([])

    public init(hosts: PostgresHosts, leaseTimeoutSeconds: Double = 3, batchedStatements: Bool = true) {
        self.hosts = hosts
        self.offersBatchedStatements = batchedStatements
        self.leaseTimeoutSeconds = leaseTimeoutSeconds
    }

    /// One server.
    public convenience init(
        pool: PostgresPool, leaseTimeoutSeconds: Double = 3, batchedStatements: Bool = false, logger: Logger = Logger(label: "postgres")
    ) {
        self.init(
            hosts: PostgresHosts(hosts: [.init(name: "primary", pool: pool)], logger: logger), leaseTimeoutSeconds: leaseTimeoutSeconds,
            batchedStatements: batchedStatements)
    }

    /// Lookups that share statements on dedicated connections, one per event loop of `loops` (see
    /// ``PostgresBatchedStatement``); nil when this database was made without a connection configuration.
    public func batchedStatement<Key: Hashable & Sendable, Value: Sendable>(
        sql: String, maxBatch: Int, logger: Logger, loops: [any EventLoop] = Array(MultiThreadedEventLoopGroup.singleton.makeIterator()),
        prepare: @escaping PostgresBatchedStatement<Key, Value>.Prepare
    ) -> PostgresBatchedStatement<Key, Value>? {
        guard offersBatchedStatements else { return nil }
        let ids = Atomic(0)
        let hosts = self.hosts
        let statement = PostgresBatchedStatement<Key, Value>(
            sql: sql, maxBatch: maxBatch, loops: loops, logger: logger,
            // Each (re)connection goes to the primary of the moment.
            connect: { loop in
                try await PostgresConnection.connect(
                    on: loop, configuration: hosts.current.connection, id: ids.add(1, ordering: .relaxed).newValue, logger: logger)
            },
            prepare: prepare)
        batched.withLock { $0.append(statement.close) }
        return statement
    }

    /// The pool's size per process unless `DATABASE_POOL_MAX_CONNECTIONS` says otherwise (``PostgresPoolSettings``).
    public static let maximumConnections = 10
    /// How long opening a connection may take, in the pool and for the batched statements' own connections, unless the
    /// URL's `connect_timeout` says otherwise.
    static let connectTimeoutSeconds: Int64 = 3

    /// Every host of a URL that may name several (`postgres://user@db1:5432,db2:5433/accounts?target_session_attrs=read-write`),
    /// each with the URL's user, database and options. `target_session_attrs` may be `read-write` or `primary` (what the
    /// service does with several hosts anyway) or `any` with one host.
    public static func hostConfigurations(url: String) throws -> [(name: String, connection: PostgresConnection.Configuration)] {
        guard let match = url.wholeMatch(of: /(postgres(?:ql)?:\/\/)([^@\/?]*@)?([^\/?]*)(.*)/) else {
            throw StorageError.invalidURL("expected postgres://user:pass@host:port/db")
        }
        let hosts = match.output.3.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        guard hosts.count <= 8, hosts.allSatisfy({ !$0.isEmpty }) else {
            throw StorageError.invalidURL("hosts are host:port, comma-separated (at most 8)")
        }
        guard var options = URLComponents(string: "x://h" + match.output.4) else { throw StorageError.invalidURL("the path or query cannot be read") }
        let attributes = options.queryItems?.first(where: { $0.name == "target_session_attrs" })?.value
        if let attributes, !["read-write", "primary"].contains(attributes) && !(attributes == "any" && hosts.count == 1) {
            throw StorageError.invalidURL("target_session_attrs must be read-write or primary (the service always writes to the primary)")
        }
        // The service's own option is not a server setting: it is not passed on.
        options.queryItems = options.queryItems?.filter { $0.name != "target_session_attrs" }
        if options.queryItems?.isEmpty == true { options.queryItems = nil }
        let rest = options.percentEncodedPath + (options.percentEncodedQuery.map { "?" + $0 } ?? "")
        return try hosts.map { host in
            (host, try configuration(url: "\(match.output.1)\(match.output.2 ?? "")\(host)\(rest)"))
        }
    }

    /// One connection's settings from a `postgres://user:pass@host:port/db?sslmode=…` URL (one host).
    public static func configuration(url: String) throws -> PostgresConnection.Configuration {
        guard let components = URLComponents(string: url),
            components.scheme == "postgres" || components.scheme == "postgresql",
            let bracketed = components.host, !bracketed.isEmpty
        else { throw StorageError.invalidURL("expected postgres://user:pass@host:port/db") }
        // An IPv6 literal comes back as `[::1]`; the connection wants the address itself.
        let host = bracketed.hasPrefix("[") && bracketed.hasSuffix("]") ? String(bracketed.dropFirst().dropLast()) : bracketed
        let database = String(components.path.drop(while: { $0 == "/" }))
        let tls: PostgresConnection.Configuration.TLS
        switch components.queryItems?.first(where: { $0.name == "sslmode" })?.value ?? "disable" {
        case "disable": tls = .disable
        case "prefer": tls = .prefer(try NIOSSLContext(configuration: .makeClientConfiguration()))
        case "require", "verify-full": tls = .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
        default: throw StorageError.invalidURL("sslmode must be disable, prefer, require or verify-full")
        }
        var configuration = PostgresConnection.Configuration(
            host: host, port: components.port ?? 5432, username: components.user ?? "postgres", password: components.password,
            database: database.isEmpty ? nil : database, tls: tls)
        // libpq's `connect_timeout` (whole seconds, 1 to 600); else ``connectTimeoutSeconds``.
        let timeout = components.queryItems?.first(where: { $0.name == "connect_timeout" })?.value
        guard let seconds = timeout.map({ Int64($0) }) ?? connectTimeoutSeconds, (1...600).contains(seconds) else {
            throw StorageError.invalidURL("connect_timeout must be whole seconds from 1 to 600")
        }
        configuration.options.connectTimeout = .seconds(seconds)
        // Prepared statements always run their generic plan. PostgreSQL otherwise re-plans a statement on every call
        // while a custom plan looks cheaper, which for the batched entitlement statement (an array of token hashes whose
        // length varies) meant about 2 ms of planning per 0.5 ms of execution. Every prepared statement here is a
        // lookup by key, for which the generic plan is the custom one.
        configuration.options.additionalStartupParameters = [("plan_cache_mode", "force_generic_plan")]
        return configuration
    }

    public func transaction<T: Sendable>(
        isolation: TransactionIsolation, logger: Logger, _ body: @escaping @Sendable (any SQLExecutor) async throws -> T
    ) async throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await lease(logger: logger) { connection, _ in
                    let executor = PostgresExecutor(connection: connection, logger: logger)
                    let begin = isolation == .serializable ? "BEGIN ISOLATION LEVEL SERIALIZABLE" : "BEGIN"
                    return try await executor.inTransaction(begin: begin) { try await body(executor) }
                }
            } catch let error as PSQLError where Self.isRetryable(error) && attempt < transactionAttemptsMax {
                logger.debug("retrying transaction", metadata: ["attempt": "\(attempt)", "sqlstate": "\(Self.sqlState(error) ?? "")"])
                try await Task.sleep(for: .milliseconds(Int.random(in: 1...(5 << min(attempt, 5)))))
            } catch let error as PSQLError {
                throw Self.mapped(error)
            }
        }
    }

    public func readTransaction<T: Sendable>(logger: Logger, _ body: @escaping @Sendable (any SQLExecutor) async throws -> T) async throws -> T {
        do {
            return try await lease(logger: logger) { connection, _ in
                let executor = PostgresExecutor(connection: connection, logger: logger)
                return try await executor.inTransaction(begin: "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY") { try await body(executor) }
            }
        } catch let error as PSQLError {
            throw Self.mapped(error)
        }
    }

    public func withConnection<T: Sendable>(logger: Logger, _ body: @escaping @Sendable (any SQLExecutor) async throws -> T) async throws -> T {
        do {
            return try await lease(logger: logger) { try await body(PostgresExecutor(connection: $0, logger: logger, pool: $1)) }
        } catch let error as PSQLError {
            throw Self.mapped(error)
        }
    }

    public func ping(timeoutSeconds: Double, logger: Logger) async throws {
        _ = try await withConnection(logger: logger) { try await $0.query("SELECT 1 AS one") }
    }

    /// Leases a connection, giving up after `leaseTimeoutSeconds` with `StorageError.unavailable`.
    /// The lease runs as its own task, watched by a timer on an event loop (a `Task.sleep` racing it cost a dispatch
    /// timer per query, about a sixth of a cached read's CPU). The timer fires every `leaseTimeoutSeconds` while the
    /// lease runs:
    /// - no connection yet: the lease is cancelled and answers `unavailable`;
    /// - the leased connection has been closed by the server (an outage, a failover, `pg_terminate_backend`, a
    ///   dropped database) and the work is still waiting: the caller gets `unavailable` at once. postgres-nio 1.33 can
    ///   leave a query written to a connection the server is closing unanswered forever; without this the caller
    ///   (and, through the ledger sweeper, the app's shutdown) waited with it. The stuck query is abandoned.
    /// A leased connection that is still open runs to completion, however long it takes.
    private func lease<T: Sendable>(
        logger: Logger, _ body: @Sendable @escaping (PostgresConnection, PostgresPool) async throws -> T
    ) async throws -> T {
        let hosts = self.hosts
        let pool = hosts.current.pool
        let watch = LeaseWatch<T>(everySeconds: leaseTimeoutSeconds)
        do {
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    watch.begin(continuation)
                    watch.started(
                        Task {
                            do {
                                let value = try await pool.withConnection { connection in
                                    // Answered `unavailable` already (no connection in time): the work must not run late.
                                    guard watch.leased(connection) else { throw CancellationError() }
                                    return try await StorageMetrics.using(StorageMetrics.postgresInUse) { try await body(connection, pool) }
                                }
                                watch.finish(.success(value))
                            } catch {
                                watch.finish(.failure(error))
                            }
                        })
                    watch.arm()
                }
            } onCancel: {
                watch.cancel()
            }
        } catch {
            hosts.suspect(error)
            throw error
        }
    }

    /// Closes the batched statements' connections (the pool stops with its service).
    public func close() async throws {
        for close in batched.withLock({ $0 }) { await close() }
    }

    static func sqlState(_ error: PSQLError) -> String? { error.serverInfo?[.sqlState] }

    static func isRetryable(_ error: PSQLError) -> Bool {
        guard let state = sqlState(error) else { return false }
        return state == "40001" || state == "40P01"
    }

    static func mapped(_ error: PSQLError) -> any Error {
        if let state = sqlState(error) {
            if state == "23505" { return StorageError.uniqueViolation(error.serverInfo?[.constraintName] ?? "unique") }
            if state == "55P03" { return StorageError.locked }
            // Class 53 is the server short of a resource (53300: too many connections): an outage, not a bug.
            if state.hasPrefix("08") || state.hasPrefix("53") || state == "57P01" || state == "57P03" {
                return StorageError.unavailable("sqlstate \(state)")
            }
            // A server that became a standby (a failover): 503 while the primary is found again, never a 500.
            if state == "25006" || state == "57P02" {
                return StorageError.unavailable("the server is read-only (sqlstate \(state)); finding the primary")
            }
            return error
        }
        return StorageError.unavailable(loggedDescription(of: error))
    }

    public func migrate(_ migrations: [Migration], logger: Logger) async throws -> [Migration] {
        // Several hosts: start on the one that is the primary now.
        if hosts.isMultiHost, !(await hosts.locate()) { throw StorageError.unavailable("no host of DATABASE_URL is a writable primary") }
        return try await withConnection(logger: logger) { executor in
            // Session-level advisory lock: a second process starting at the same time waits here, for as long as the
            // first one's migrations take (no lock timeout), then finds every migration applied.
            try await executor.query("SET lock_timeout = 0")
            try await executor.query("SELECT pg_advisory_lock(7246813579) AS locked")
            do {
                let applied = try await MigrationRunner.apply(migrations, executor: executor, logger: logger)
                try await executor.query("SELECT pg_advisory_unlock(7246813579) AS unlocked")
                try await executor.query("RESET lock_timeout")
                return applied
            } catch {
                _ = try? await executor.query("SELECT pg_advisory_unlock(7246813579) AS unlocked")
                _ = try? await executor.query("RESET lock_timeout")
                throw error
            }
        }
    }
}

enum LeaseVerdict<T: Sendable> { case finished, noConnection(Task<Void, Never>?, CheckedContinuation<T, any Error>), connectionClosed, running }

/// One lease's state, shared by its task, its timer and its caller; the caller is resumed exactly once.
final class LeaseWatch<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        var work: Task<Void, Never>?
        var timer: Scheduled<Void>?
        var connection: PostgresConnection?
        var cancelled = false
    }
    private let state = Mutex(State())
    let everySeconds: Double

    init(everySeconds: Double) { self.everySeconds = everySeconds }

    func begin(_ continuation: CheckedContinuation<T, any Error>) { state.withLock { $0.continuation = continuation } }

    func started(_ work: Task<Void, Never>) {
        let cancelled = state.withLock { state in
            state.work = work
            return state.cancelled
        }
        if cancelled { work.cancel() }
    }

    /// Records the connection the work got; false when the caller was already answered (the work must not run).
    func leased(_ connection: PostgresConnection) -> Bool {
        state.withLock { state in
            guard state.continuation != nil else { return false }
            state.connection = connection
            return true
        }
    }

    func cancel() {
        let work = state.withLock { state in
            state.cancelled = true
            return state.work
        }
        work?.cancel()
    }

    /// Resumes the caller, once; later results (an abandoned lease finishing after all) are dropped.
    func finish(_ result: Result<T, any Error>) {
        let (continuation, timer) = state.withLock { state in
            defer { state.continuation = nil; state.timer = nil }
            return (state.continuation, state.timer)
        }
        timer?.cancel()
        continuation?.resume(with: result)
    }

    /// Schedules the next check, unless the lease has finished.
    func arm() {
        let timer = MultiThreadedEventLoopGroup.singleton.any().scheduleTask(in: .milliseconds(Int64(everySeconds * 1000))) { [self] in
            check()
        }
        let finished = state.withLock { state in
            guard state.continuation != nil else { return true }
            state.timer = timer
            return false
        }
        if finished { timer.cancel() }
    }

    private func check() {
        // Decided under the lock: once the caller is answered for want of a connection, `leased` refuses the work.
        let verdict: LeaseVerdict<T> = state.withLock { state in
            guard let continuation = state.continuation else { return .finished }
            guard let connection = state.connection else {
                state.continuation = nil
                state.timer = nil
                return .noConnection(state.work, continuation)
            }
            return connection.isClosed ? .connectionClosed : .running
        }
        switch verdict {
        case .finished: return
        case .noConnection(let work, let continuation):
            // The pool's wait is cancelled too, but the answer never depends on the pool honouring that (a pool
            // retrying a dead host's connections did not, and requests hung).
            work?.cancel()
            continuation.resume(throwing: StorageError.unavailable("no database connection within \(everySeconds)s"))
            return
        case .connectionClosed:
            finish(.failure(StorageError.unavailable("the database closed the connection")))
            return
        case .running: break
        }
        arm()
    }
}

/// A bind in PostgreSQL's text format, with its own type. A prepared statement's parameter types are fixed on each
/// connection by its first call there, and a NULL leaves its parameter's type to the server's inference (`?::JSONB` →
/// jsonb): a later value sent in binary as another type would then be misread ("unsupported jsonb version number 123",
/// a spend with metadata after one without). In text format the server reads every value with the input function of
/// the parameter's type, whatever the first call bound.
struct TextFormatBind: PostgresDynamicTypeEncodable {
    let text: String
    let psqlType: PostgresDataType
    var psqlFormat: PostgresFormat { .text }
    /// `bytea`'s text form: `\x` and two hex digits per byte.
    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = [UInt8(ascii: "\\"), UInt8(ascii: "x")]
        text.reserveCapacity(2 + bytes.count * 2)
        for byte in bytes { text += [digits[Int(byte >> 4)], digits[Int(byte & 0x0f)]] }
        return String(decoding: text, as: UTF8.self)
    }
    func encode<JSONEncoder: PostgresJSONEncoder>(into byteBuffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        byteBuffer.writeString(text)
    }
}

struct PostgresExecutor: SQLExecutor {
    let connection: PostgresConnection
    let logger: Logger
    /// The pool the connection came from, whose watch confirms implicit commits (nil: none).
    var pool: PostgresPool? = nil
    var engine: Engine { .postgres }

    /// Returns once PostgreSQL has sent the `ReadyForQuery` that follows the implicit commit (flushed, and confirmed by
    /// a synchronous standby). The pool's connections see it go by (``PostgresCommitWatch``), usually in the same read
    /// as the statement's rows; any other connection asks with a second statement, which postgres-nio sends only after
    /// that `ReadyForQuery`. A commit that fails, or a connection lost before it, fails this call: the caller answers
    /// `unavailable`, never success.
    func confirmImplicitCommit() async throws {
        if let watch = pool?.commitWatch(of: connection), try await watch.confirm(on: connection.eventLoop) { return }
        // No transaction id now: the write's transaction is over (inside a transaction block left open on the
        // connection, the write's own would still be assigned).
        let rows = try await query("SELECT txid_current_if_assigned() IS NULL AS committed", [])
        guard try rows.first?.bool("committed") == true else { throw PostgresCommitWatch.commitFailed }
    }

    @discardableResult
    func query(_ sql: String, _ binds: [any SQLBindable]) async throws -> [SQLRow] {
        var bindings = PostgresBindings(capacity: binds.count)
        for bind in binds {
            switch bind.sqlValue {
            case .null: bindings.appendNull()
            case .int(let v): bindings.append(TextFormatBind(text: String(v), psqlType: .int8))
            case .double(let v): bindings.append(TextFormatBind(text: "\(v)", psqlType: .float8))
            case .text(let v):
                guard !v.utf8.contains(0) else { throw StorageError.nulCharacter }
                bindings.append(TextFormatBind(text: v, psqlType: .text))
            case .bool(let v): bindings.append(TextFormatBind(text: v ? "t" : "f", psqlType: .bool))
            case .bytes(let v): bindings.append(TextFormatBind(text: TextFormatBind.hex(v), psqlType: .bytea))
            }
        }
        // A closed connection fails at once (postgres-nio 1.33 may never answer a query written to it; see `lease`).
        guard !connection.isClosed else { throw StorageError.unavailable("the database closed the connection") }
        do {
            guard Traces.enabled else { return try await run(sql, bindings) }
            return try await Traces.span("db.query", client: true, attributes: Self.spanAttributes(sql)) { try await run(sql, bindings) }
        } catch let error as PSQLError {
            throw PostgresDatabase.isRetryable(error) ? error : PostgresDatabase.mapped(error)
        }
    }

    private func run(_ sql: String, _ bindings: PostgresBindings) async throws -> [SQLRow] {
        if let slot = PreparedStatements.shared.slot(for: sql) {
            return try await Self.execute(PreparedSlots.all[slot], bindings, connection, logger)
        }
        let query = PostgresQuery(unsafeSQL: SQLDialect.numberedPlaceholders(sql), binds: bindings)
        return try await Self.rows(connection.query(query, logger: logger))
    }

    /// What a statement's span records: the engine and the statement's text (its values are bound, never in it).
    static func spanAttributes(_ sql: String) -> [String: String] {
        ["db.system.name": "postgresql", "db.query.text": String(sql.prefix(300))]
    }

    /// A connection lost mid-transaction has no transaction left to roll back: PostgreSQL ends it with the session.
    /// ROLLBACK is not sent there (it could wait forever; see `PostgresDatabase.lease`); the connection is closed so
    /// the pool replaces it.
    func rollback(after error: any Error) async {
        if case StorageError.unavailable = error {
            try? await connection.close()
            return
        }
        _ = try? await query("ROLLBACK")
    }

    static func execute<Slot: PreparedSlot>(
        _ slot: Slot.Type, _ bindings: PostgresBindings, _ connection: PostgresConnection, _ logger: Logger
    ) async throws -> [SQLRow] {
        try await rows(connection.execute(SlotStatement<Slot>(bindings: bindings), logger: logger))
    }

    /// The rows of a result; they share one ``SQLColumns``.
    static func rows<Rows: AsyncSequence>(_ sequence: Rows) async throws -> [SQLRow] where Rows.Element == PostgresRow {
        var columns: SQLColumns?
        var rows: [SQLRow] = []
        for try await row in sequence {
            let shared = columns ?? SQLColumns(row.map(\.columnName))
            columns = shared
            var cells: [SQLValue] = []
            cells.reserveCapacity(row.count)
            for cell in row { cells.append(try Self.value(of: cell)) }
            rows.append(SQLRow(columns: shared, cells: cells))
        }
        return rows
    }

    static func value(of cell: PostgresCell) throws -> SQLValue {
        if cell.format == .binary, let value = binaryValue(cell.bytes, cell.dataType) { return value }
        return try decoded(cell)
    }

    /// The common binary column types read straight from their bytes, without postgres-nio's generic decoding (which
    /// costs a metadata lookup per cell; the snapshot's rows have about forty cells). nil: not one of them, or bytes of
    /// an unexpected length, for ``decoded(_:)`` to handle (and report).
    static func binaryValue(_ bytes: ByteBuffer?, _ type: PostgresDataType) -> SQLValue? {
        guard let bytes else { return .null }
        let count = bytes.readableBytes
        switch type {
        case .int8 where count == 8: return bytes.getInteger(at: bytes.readerIndex, as: Int64.self).map { .int($0) }
        case .int4 where count == 4: return bytes.getInteger(at: bytes.readerIndex, as: Int32.self).map { .int(Int64($0)) }
        case .int2 where count == 2: return bytes.getInteger(at: bytes.readerIndex, as: Int16.self).map { .int(Int64($0)) }
        case .bool where count == 1: return bytes.getInteger(at: bytes.readerIndex, as: UInt8.self).map { .bool($0 != 0) }
        case .float8 where count == 8: return bytes.getInteger(at: bytes.readerIndex, as: UInt64.self).map { .double(Double(bitPattern: $0)) }
        case .text, .varchar, .name, .bpchar: return bytes.getString(at: bytes.readerIndex, length: count).map { .text($0) }
        default: return nil
        }
    }

    static func decoded(_ cell: PostgresCell) throws -> SQLValue {
        guard cell.bytes != nil else { return .null }
        switch cell.dataType {
        case .int2, .int4, .int8, .oid: return .int(try cell.decode(Int64.self))
        case .bool: return .bool(try cell.decode(Bool.self))
        case .float4, .float8: return .double(try cell.decode(Double.self))
        case .numeric: return .double(NSDecimalNumber(decimal: try cell.decode(Decimal.self)).doubleValue)
        case .bytea: return .bytes(Array(buffer: try cell.decode(ByteBuffer.self)))
        default: return .text(try cell.decode(String.self))
        }
    }
}

/// Server-side prepared statements for the SQL that runs often. A statement is parsed and planned once per
/// connection instead of on every call (the entitlement snapshot's planning cost more than its execution).
/// postgres-nio names a prepared statement by a Swift type, so a SQL text that has run `threshold` times is given
/// one of a fixed set of slot types (``PreparedSlots``) for the life of the process; rarely run SQL (migrations,
/// admin searches) never takes a slot. Only SELECT / INSERT / UPDATE / DELETE / WITH statements are prepared.
/// A statement whose text varies with its input (`IN (?, ?, …)`, `VALUES (…), (…)` over a batch: the webhook fan-out,
/// the webhook record's `UNION ALL` rows) is one family: its first `familySlots` texts to reach the threshold take slots
/// for good, and the family's other lengths run unprepared, so a long-running process never spends its slots on one-off
/// list lengths (``shape(of:)``). A hot read whose list varies by user takes it in one bind instead
/// (``SQLDialect/isIn(_:)``).
final class PreparedStatements: Sendable {
    static let shared = PreparedStatements()
    static let threshold = 3
    static let countedMax = 20_000
    /// The slots one family of texts (``shape(of:)``) may hold.
    static let familySlots = 4

    private struct State {
        /// Runs so far of the texts without a slot, by the text's hash (a fan-out text can be a megabyte; a collision
        /// only changes when a text is prepared).
        var counts: [Int: Int] = [:]
        var slots: [String: Int] = [:]
        var sql: [String] = []
        /// The slots each family (shape) holds.
        var shapes: [String: Int] = [:]
        /// Texts (by hash) of a family that holds all its slots: never counted again.
        var unprepared: Set<Int> = []
    }
    private let state = Mutex(State())

    private enum Step {
        case answer(Int?)
        /// The text ran `threshold` times: its family decides (looked up outside the lock, a scan of the text).
        case due
    }

    func slot(for sql: String) -> Int? {
        if let slot = state.withLock({ $0.slots[sql] }) { return slot }
        let hash = sql.hashValue
        let step = state.withLock { state -> Step in
            if let slot = state.slots[sql] { return .answer(slot) }
            guard state.sql.count < PreparedSlots.all.count, Self.preparable(sql), !state.unprepared.contains(hash) else { return .answer(nil) }
            let count = (state.counts[hash] ?? 0) + 1
            guard count >= Self.threshold else {
                if state.counts.count < Self.countedMax || state.counts[hash] != nil { state.counts[hash] = count }
                return .answer(nil)
            }
            return .due
        }
        if case .answer(let slot) = step { return slot }
        let shape = Self.shape(of: sql)
        let numbered = SQLDialect.numberedPlaceholders(sql)
        return state.withLock { state -> Int? in
            if let slot = state.slots[sql] { return slot }  // given meanwhile by another caller
            guard state.sql.count < PreparedSlots.all.count, !state.unprepared.contains(hash) else { return nil }
            state.counts[hash] = nil
            guard state.shapes[shape, default: 0] < Self.familySlots else {
                if state.unprepared.count < Self.countedMax { state.unprepared.insert(hash) }
                return nil
            }
            state.shapes[shape, default: 0] += 1
            state.slots[sql] = state.sql.count
            state.sql.append(numbered)
            return state.sql.count - 1
        }
    }

    /// `sql` with every run of the same list item collapsed to one, until none is left: `?, ?, ?`, `(?, 'x'), (?, 'x')`
    /// (an item may hold one level of parentheses, as `CAST(? AS TEXT)`) and `SELECT … UNION ALL SELECT …` (the
    /// webhook record's rows). Two texts of one shape differ only in how long their lists are.
    static func shape(of sql: String) -> String {
        var shape = sql
        while true {
            let collapsed = shape.replacing(listItems) { $0.output.1 }.replacing(unionItems) { $0.output.1 }
            if collapsed == shape { return shape }
            shape = collapsed
        }
    }

    nonisolated(unsafe) private static let listItems = #/(\?|\((?:[^()]|\([^()]*\))*\))(?:\s*,\s*\1)+/#
    nonisolated(unsafe) private static let unionItems = #/(SELECT\b(?:[^()]|\([^()]*\))*?)(?:\s+UNION ALL\s+\1)+/#

    func sql(slot: Int) -> String { state.withLock { $0.sql[slot] } }

    static func preparable(_ sql: String) -> Bool {
        let head = sql.drop(while: { $0.isWhitespace }).prefix(6).uppercased()
        return head.hasPrefix("SELECT") || head.hasPrefix("INSERT") || head.hasPrefix("UPDATE") || head.hasPrefix("DELETE") || head.hasPrefix("WITH")
    }
}

protocol PreparedSlot: SendableMetatype { static var index: Int { get } }

struct SlotStatement<Slot: PreparedSlot>: PostgresPreparedStatement {
    typealias Row = PostgresRow
    static var name: String { "as_prepared_\(Slot.index)" }
    static var sql: String { PreparedStatements.shared.sql(slot: Slot.index) }
    let bindings: PostgresBindings
    func makeBindings() throws -> PostgresBindings { bindings }
    func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
}

/// How a ``PostgresPool`` keeps its connections: at least `minimumConnections` stay open once opened (the sweep opens
/// them at start), the rest close after a minute unused; `keepAliveSeconds` > 0 checks idle connections with `SELECT 1`
/// that often (one that does not answer within 3 s is closed). A connection the server closes is forgotten at once; for
/// middleboxes that drop idle connections silently, set PostgreSQL's `tcp_keepalives_idle` (docs/operations.md).
///
/// `maximumConnections` bounds the statements one node runs at once; callers beyond it wait in line. PostgreSQL does the
/// most work with a few active statements per core: on two cores, `bench-ledger`'s 32 concurrent spends ran about 11 %
/// faster through 4–10 connections than through 20 (one hot user's 20 %), at half the p99 or less (docs/performance.md).
public struct PostgresPoolSettings: Sendable, Equatable {
    /// Connections opened at start and kept open when idle (`DATABASE_POOL_MIN_CONNECTIONS`; at most the maximum).
    public var minimumConnections: Int
    /// How long a statement waits for another transaction's row or table lock before it fails with
    /// ``StorageError/locked`` (PostgreSQL's `lock_timeout` on every connection; `DATABASE_LOCK_TIMEOUT_SECONDS`,
    /// default 30; 0: forever, PostgreSQL's own default). Without it, a session that holds a user's rows (an operator's
    /// open transaction, a stuck client of another service) kept that user's requests waiting as long as it did.
    public var lockTimeoutSeconds: Int64
    /// How often an idle connection is checked with `SELECT 1` (`DATABASE_KEEPALIVE_SECONDS`; 0: never, the default).
    public var keepAliveSeconds: Int64
    /// The most connections the pool opens (`DATABASE_POOL_MAX_CONNECTIONS`, per node; default 10).
    public var maximumConnections: Int

    public init(
        minimumConnections: Int = 0, keepAliveSeconds: Int64 = 0, maximumConnections: Int = PostgresDatabase.maximumConnections,
        lockTimeoutSeconds: Int64 = 30
    ) {
        (self.minimumConnections, self.keepAliveSeconds) = (minimumConnections, keepAliveSeconds)
        (self.maximumConnections, self.lockTimeoutSeconds) = (maximumConnections, lockTimeoutSeconds)
    }

    /// The largest `maximumConnections` a node may be configured with.
    public static let connectionsLimit = 1_000

    /// The server's: connections opened as needed, none kept open when idle, no keep-alive query.
    public static let server = PostgresPoolSettings(minimumConnections: 0, keepAliveSeconds: 0)
}
