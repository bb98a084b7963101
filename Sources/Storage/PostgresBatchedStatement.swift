import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import Synchronization

/// Lookups by key that share statements on PostgreSQL, run on one dedicated connection per event loop and driven from
/// that loop without Swift concurrency.
///
/// `load(key)` joins the lookups waiting on its event loop's lane. A lane runs one statement at a time on its own
/// connection: the lookups that arrive while one runs share the next, which is sent from the loop as soon as the last
/// one's rows are in, with `prepare`'s binds for their distinct keys (at most `maxBatch`). A lone lookup starts at once.
/// Every statement starts after each of its lookups was asked for, so a lookup never sees data older than its request.
///
/// Why not the pool and `async` queries: on two cores, a shared statement through a leased pool connection spent about
/// 2.8 ms per round trip, of which PostgreSQL's work was 0.55 ms; the rest was the lease, task hops and async row
/// iteration, with the answer's rows read on whichever loop the pooled connection lived. Here a lookup, its statement,
/// its rows and its response stay on one loop (see README, Benchmarks).
///
/// Failures: a connection that cannot be opened fails the waiting lookups with `unavailable` (the next lookup tries
/// again); a connection PostgreSQL closes fails its statement's lookups with `unavailable` at once (postgres-nio can
/// leave a query written to a closing connection unanswered) and is reopened for the lookups still waiting.
public final class PostgresBatchedStatement<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    /// For the distinct keys of one statement: its binds, and how its rows become values by key.
    public typealias Prepare = @Sendable ([Key]) -> (binds: [SQLValue], finish: @Sendable ([SQLRow]) throws -> [Key: Value])
    /// Opens a connection on the given event loop.
    public typealias Connect = @Sendable (any EventLoop) async throws -> PostgresConnection

    private let lanes: [Lane]

    /// `sql` uses `?` placeholders; `loops` are the event loops lookups come from (the first also takes lookups
    /// asked from elsewhere).
    public init(sql: String, maxBatch: Int, loops: [any EventLoop], logger: Logger, connect: @escaping Connect, prepare: @escaping Prepare) {
        precondition(maxBatch >= 1 && !loops.isEmpty)
        let sql = SQLDialect.numberedPlaceholders(sql)
        lanes = loops.map { Lane(loop: $0, sql: sql, maxBatch: maxBatch, logger: logger, connect: connect, prepare: prepare) }
    }

    /// The value for `key` from the next statement its loop's lane runs (nil: not found), or that statement's error.
    /// Runs on the caller's executor (`nonisolated(nonsending)`), so the lane is the caller's event loop.
    public nonisolated(nonsending) func load(_ key: Key) async throws -> Value? {
        let current = MultiThreadedEventLoopGroup.currentEventLoop
        let lane = current.flatMap { loop in lanes.first { $0.loop === loop } } ?? lanes[0]
        return try await lane.load(key)
    }

    /// Fails the waiting lookups and later ones with `unavailable` and closes the connections.
    public func close() async {
        for lane in lanes { await lane.close() }
    }

    /// How many connections the lanes have opened so far (for tests).
    var connectionsOpened: Int { lanes.reduce(0) { $0 + $1.opened } }

    private struct Waiter {
        let key: Key
        let continuation: CheckedContinuation<Value?, any Error>
        func answer(_ result: Result<[Key: Value], any Error>) { continuation.resume(with: result.map { $0[key] }) }
    }

    private struct Held: Sendable {
        let connection: PostgresConnection
        let query: PreparedQuery
        /// The prepared statement's column names, read from its first row (they never change).
        let columns: NIOLoopBoundBox<SQLColumns?>

        init(connection: PostgresConnection, query: PreparedQuery) {
            self.connection = connection
            self.query = query
            columns = .makeEmptyBox(valueType: SQLColumns.self, eventLoop: connection.eventLoop)
        }
    }

    private final class Lane: Sendable {
        private struct State: ~Copyable {
            var pending: [Waiter] = []
            /// A statement runs, or the connection is being opened.
            var running = false
            var held: Held?
            var inFlight: [Waiter]?
            var closed = false
            var opened = 0
        }

        private enum Start { case none, pump(Held), connect, closed }

        let loop: any EventLoop
        private let sql: String
        private let maxBatch: Int
        private let logger: Logger
        private let connect: Connect
        private let prepare: Prepare
        private let state = Mutex(State())

        init(loop: any EventLoop, sql: String, maxBatch: Int, logger: Logger, connect: @escaping Connect, prepare: @escaping Prepare) {
            self.loop = loop
            self.sql = sql
            self.maxBatch = maxBatch
            self.logger = logger
            self.connect = connect
            self.prepare = prepare
        }

        var opened: Int { state.withLock { $0.opened } }

        nonisolated(nonsending) func load(_ key: Key) async throws -> Value? {
            try await withCheckedThrowingContinuation { continuation in
                let start: Start = state.withLock { state in
                    guard !state.closed else { return .closed }
                    state.pending.append(Waiter(key: key, continuation: continuation))
                    guard !state.running else { return .none }
                    state.running = true
                    if let held = state.held, !held.connection.isClosed { return .pump(held) }
                    // A connection that closed since its last statement is replaced at once (`drop` may not have run yet).
                    state.held = nil
                    return .connect
                }
                switch start {
                case .none: break
                case .closed: continuation.resume(throwing: StorageError.unavailable("the database is closing"))
                case .pump(let held): held.connection.eventLoop.execute { self.pump(held) }
                case .connect: open()
                }
            }
        }

        /// Opens and prepares a connection on this lane's loop, then runs what waits.
        private func open() {
            Task {
                let held: Held
                do {
                    let connection = try await connect(loop)
                    do {
                        held = Held(connection: connection, query: try await connection.prepare(query: sql).get())
                    } catch {
                        try? await connection.close()
                        throw error
                    }
                } catch {
                    logger.warning("could not open a connection for batched statements", metadata: ["error": .error(error)])
                    failWaiting(StorageError.unavailable("no database connection: \(loggedDescription(of: error))"))
                    return
                }
                let closed = state.withLock { state in
                    state.opened += 1
                    if !state.closed { state.held = held }
                    return state.closed
                }
                guard !closed else {
                    try? await held.connection.close()
                    return
                }
                held.connection.closeFuture.whenComplete { _ in self.drop(held) }
                held.connection.eventLoop.execute { self.pump(held) }
            }
        }

        /// Fails every waiting lookup; the next one starts over.
        private func failWaiting(_ error: any Error) {
            let waiting = state.withLock { state in
                state.running = false
                defer { state.pending = [] }
                return state.pending
            }
            for waiter in waiting { waiter.answer(.failure(error)) }
        }

        /// Once `held` closed or failed (on its loop): if it is still the lane's connection, fails its statement's
        /// lookups and reopens for those still waiting.
        private func drop(_ held: Held) {
            let (inFlight, reopen) = state.withLock { state -> ([Waiter], Bool) in
                guard state.held?.connection === held.connection else { return ([], false) }
                state.held = nil
                let inFlight = state.inFlight ?? []
                state.inFlight = nil
                let reopen = !state.pending.isEmpty && !state.closed
                if !reopen { state.running = false }
                return (inFlight, reopen)
            }
            for waiter in inFlight { waiter.answer(.failure(StorageError.unavailable("the database closed the connection"))) }
            if reopen { open() }
        }

        /// On the connection's loop: sends the next statement, or stops when nothing waits.
        private func pump(_ held: Held) {
            // A connection that closed after its last statement hands what waits to a new one.
            if held.connection.isClosed { return drop(held) }
            let batch: [Waiter] = state.withLock { state in
                // A lost connection hands what waits to a new one (`drop`).
                guard state.held?.connection === held.connection else { return [] }
                let count = min(state.pending.count, maxBatch)
                let batch = Array(state.pending.prefix(count))
                state.pending.removeFirst(count)
                if batch.isEmpty { state.running = false } else { state.inFlight = batch }
                return batch
            }
            guard !batch.isEmpty else { return }
            var keys: [Key] = []
            var seen = Set<Key>()
            for waiter in batch where seen.insert(waiter.key).inserted { keys.append(waiter.key) }
            let (binds, finish) = prepare(keys)
            let eventLoop = held.connection.eventLoop
            let rows = NIOLoopBoundBox([SQLRow](), eventLoop: eventLoop)
            held.query.execute(binds.map(Self.data)) { row in
                let shared = held.columns.value ?? SQLColumns(row.map(\.columnName))
                held.columns.value = shared
                var cells: [SQLValue] = []
                cells.reserveCapacity(shared.names.count)
                // postgres-nio's PreparedQuery keeps the text format its Describe reported, but results come in binary.
                for cell in row {
                    cells.append(
                        try PostgresExecutor.binaryValue(cell.bytes, cell.dataType)
                            ?? PostgresExecutor.decoded(
                                PostgresCell(
                                    bytes: cell.bytes, dataType: cell.dataType, format: .binary, columnName: cell.columnName,
                                    columnIndex: cell.columnIndex)))
                }
                rows.value.append(SQLRow(columns: shared, cells: cells))
            }.whenComplete { outcome in
                let mine = self.state.withLock { state -> Bool in
                    guard state.inFlight != nil, state.held?.connection === held.connection else { return false }
                    state.inFlight = nil
                    return true
                }
                // Already failed by `drop`.
                guard mine else { return }
                let result = Result { () throws -> [Key: Value] in
                    do { try outcome.get() } catch { throw Self.mapped(error, on: held.connection) }
                    return try finish(rows.value)
                }
                for waiter in batch { waiter.answer(result) }
                guard case .failure(StorageError.unavailable) = result else { return self.pump(held) }
                // The server is closing the connection (its error can arrive before the close): replace it.
                let _: EventLoopFuture<Void> = held.connection.close()
                self.drop(held)
            }
        }

        func close() async {
            let held = state.withLock { state in
                state.closed = true
                return state.held
            }
            failWaiting(StorageError.unavailable("the database is closing"))
            try? await held?.connection.close()
        }

        /// The statement's error as the rest of the storage layer reports it: a lost connection or a server going
        /// away (`PreparedQuery` reports postgres-nio's older `PostgresError`) is `unavailable`.
        static func mapped(_ error: any Error, on connection: PostgresConnection) -> any Error {
            switch error {
            case let error as PSQLError: return PostgresDatabase.mapped(error)
            case PostgresError.connectionClosed: return StorageError.unavailable("the database closed the connection")
            case PostgresError.server(let message):
                let state = message.fields[.sqlState] ?? ""
                if state.hasPrefix("08") || state.hasPrefix("57P") || connection.isClosed { return StorageError.unavailable("sqlstate \(state)") }
                return error
            default: return connection.isClosed ? StorageError.unavailable("the database closed the connection") : error
            }
        }

        private static func data(_ value: SQLValue) -> PostgresData {
            switch value {
            case .null: return .null
            case .int(let v): return PostgresData(int64: v)
            case .double(let v): return PostgresData(double: v)
            case .text(let v): return PostgresData(string: v)
            case .bool(let v): return PostgresData(bool: v)
            case .bytes(let v): return PostgresData(bytes: v)
            }
        }
    }
}
