import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PostgresNIO
import Synchronization

/// Confirms an implicit commit without a round trip. PostgreSQL answers a statement's rows and `CommandComplete`
/// before it commits the statement's implicit transaction at the protocol's Sync, and then sends `ReadyForQuery`
/// (or an `ErrorResponse` first, if the commit failed); postgres-nio 1.33 completes a query at `CommandComplete`. So
/// the pool's connections carry this handler between the socket (or TLS) and postgres-nio: it reads only the
/// messages' framing (a type byte and a length) in both directions, counting what asks for a `ReadyForQuery` (Sync,
/// a simple Query, a FunctionCall) and each `ReadyForQuery` received, and notes a cycle that carried an error.
/// ``confirm(on:)`` returns once every request sent so far has had its `ReadyForQuery`, which usually arrives in the
/// same read as the rows. The bytes pass on unchanged. A connection without the watch (or whose framing it lost)
/// confirms with a statement on the same connection instead (``PostgresExecutor/confirmImplicitCommit()``).
final class PostgresCommitWatch: Sendable {
    private struct State {
        /// Requests sent that PostgreSQL answers with exactly one `ReadyForQuery` each.
        var requested = 0
        var ready = 0
        /// The last `ReadyForQuery` that does not confirm a commit: its cycle carried an `ErrorResponse`, or it said
        /// the connection is inside a transaction block.
        var failedCycle = -1
        /// The last `ReadyForQuery` that said the connection is inside a transaction block.
        var notIdleCycle = -1
        /// Nothing more can be confirmed here.
        var stopped: Stop?
        var waiters: [(target: Int, continuation: CheckedContinuation<Bool, any Error>)] = []
    }
    private let state = Mutex(State())

    enum Stop: Sendable {
        /// This watch cannot tell (its framing was lost, or a `ReadyForQuery` took longer than ``patience``): the
        /// caller confirms another way.
        case lostFraming
        case closed

        var answer: Result<Bool, any Error> {
            switch self {
            case .lostFraming: .success(false)
            case .closed: .failure(StorageError.unavailable("the database closed the connection before confirming the commit"))
            }
        }
    }

    /// How long ``confirm(on:)`` waits for a `ReadyForQuery` that is not there yet before it gives up on this watch (a
    /// count that drifted would otherwise wait forever); the caller then asks with a statement, which is always right.
    static let patience = TimeAmount.seconds(2)

    /// Whether this watch has stopped (the pool closes such a connection after a failure).
    var isStopped: Bool { state.withLock { $0.stopped != nil } }

    /// Returns true once every request sent so far on the connection has had its `ReadyForQuery` and the last cycle
    /// confirms a commit; false if this watch cannot tell (the caller confirms another way); throws if the commit
    /// failed or the connection closed first.
    func confirm(on loop: any EventLoop) async throws -> Bool {
        let (now, target) = state.withLock { state -> (Result<Bool, any Error>?, Int) in
            (Self.answer(&state, target: state.requested), state.requested)
        }
        if let now { return try now.get() }
        let giveUp = loop.scheduleTask(in: Self.patience) { self.giveUp(target) }
        defer { giveUp.cancel() }
        return try await withCheckedThrowingContinuation { continuation in
            let early = state.withLock { state -> Result<Bool, any Error>? in
                if let answer = Self.answer(&state, target: target) { return answer }
                state.waiters.append((target, continuation))
                return nil
            }
            if let early { continuation.resume(with: early) }
        }
    }

    /// The answer for the request that is `target`-th, if there is one yet. A write confirmed inside a transaction
    /// block (one left open on the connection) did not commit: the watch stops, and the pool closes the connection.
    private static func answer(_ state: inout State, target: Int) -> Result<Bool, any Error>? {
        if state.stopped == .lostFraming { return Stop.lostFraming.answer }
        // A commit that failed says so even when the connection closed right after (postgres-nio closes one that
        // gets an error after a statement's `CommandComplete`).
        guard state.ready >= target else { return state.stopped?.answer }
        guard state.failedCycle != target else {
            if state.notIdleCycle == target, state.stopped == nil { state.stopped = .closed }
            return .failure(commitFailed)
        }
        return .success(true)
    }

    /// Requests sent so far that PostgreSQL answers with a `ReadyForQuery` (tests).
    var requests: Int { state.withLock { $0.requested } }

    static let commitFailed = StorageError.unavailable("the database did not commit the statement")

    /// The message types of the protocol after start-up, each way: anything else means the watch is not reading
    /// plain protocol messages (it would be misplaced), and it stops. Copying in (`G`, `W`) is left out: PostgreSQL
    /// ignores a Sync sent while copying in, so the counts would no longer pair up.
    static let frontendTypes = Set("BCDEFHPQSXcdfp".utf8)
    static let backendTypes = Set("123ACDEHIKNRSTVZcdnstv".utf8)
    static let readyForQuery = UInt8(ascii: "Z")

    /// A request that PostgreSQL answers with one `ReadyForQuery` was sent.
    fileprivate func requested() {
        state.withLock { $0.requested += 1 }
    }

    /// A `ReadyForQuery` arrived. `status`: its transaction status (`I`: idle, the implicit transaction is over);
    /// `error`: its cycle carried an `ErrorResponse`; `afterCompletion`: that error came after the statement's
    /// `CommandComplete`, so the commit itself failed (postgres-nio closes such a connection; nothing more is confirmed
    /// on it).
    fileprivate func ready(status: UInt8?, error: Bool, afterCompletion: Bool) {
        let due = state.withLock { state -> [(CheckedContinuation<Bool, any Error>, Result<Bool, any Error>)] in
            state.ready += 1
            if status != UInt8(ascii: "I") { state.notIdleCycle = state.ready }
            if error || status != UInt8(ascii: "I") { state.failedCycle = state.ready }
            if afterCompletion, state.stopped == nil { state.stopped = .closed }
            let ready = state.ready
            let waiting = state.waiters
            state.waiters = waiting.filter { $0.target > ready }
            var due: [(CheckedContinuation<Bool, any Error>, Result<Bool, any Error>)] = []
            for waiter in waiting where waiter.target <= ready {
                due.append((waiter.continuation, Self.answer(&state, target: waiter.target) ?? .success(false)))
            }
            return due
        }
        for (continuation, result) in due { continuation.resume(with: result) }
    }

    /// A `ReadyForQuery` slower than ``patience``: its waiter confirms another way; the watch goes on counting.
    private func giveUp(_ target: Int) {
        let waiters = state.withLock { state -> [CheckedContinuation<Bool, any Error>] in
            var late: [CheckedContinuation<Bool, any Error>] = []
            state.waiters.removeAll { waiter in
                guard waiter.target == target else { return false }
                late.append(waiter.continuation)
                return true
            }
            return late
        }
        for waiter in waiters { waiter.resume(returning: false) }
    }

    /// Nothing more can be confirmed here (the first reason stays).
    fileprivate func stop(_ reason: Stop) {
        let (waiters, stopped) = state.withLock { state -> ([CheckedContinuation<Bool, any Error>], Stop) in
            if state.stopped == nil { state.stopped = reason }
            defer { state.waiters = [] }
            return (state.waiters.map(\.continuation), state.stopped ?? reason)
        }
        for waiter in waiters { waiter.resume(with: stopped.answer) }
    }

    /// Opens a connection as postgres-nio would for `configuration` (TCP or a Unix socket, TLS as configured), with a
    /// watch on it. The watch joins the pipeline once the start-up is done (at a message boundary: the server sends
    /// nothing after its first `ReadyForQuery` until asked), behind the TLS handler if there is one.
    static func connect(
        on loop: any EventLoop, configuration: PostgresConnection.Configuration, id: Int, logger: Logger
    ) async throws -> (PostgresConnection, PostgresCommitWatch) {
        let bootstrap = ClientBootstrap(group: loop).connectTimeout(configuration.options.connectTimeout)
        let channel: any Channel
        do {
            if let path = configuration.unixSocketPath {
                channel = try await bootstrap.connect(unixDomainSocketPath: path).get()
            } else if let host = configuration.host {
                channel = try await bootstrap.channelOption(.tcpOption(.tcp_nodelay), value: 1).connect(host: host, port: configuration.port ?? 5432)
                    .get()
            } else {
                throw StorageError.unavailable("no host to connect to")
            }
        } catch let error as StorageError {
            throw error
        } catch {
            // As postgres-nio's own connect says it (a `PSQLError` connection error): an outage, 503, and a reason to
            // look for the primary again, never a 500.
            throw StorageError.unavailable("cannot connect to the database: \(error)")
        }
        var established = PostgresConnection.Configuration(
            establishedChannel: channel, tls: configuration.tls, username: configuration.username, password: configuration.password,
            database: configuration.database)
        established.options = configuration.options
        if established.options.tlsServerName == nil, let host = configuration.host, !Self.isIPAddress(host) {
            established.options.tlsServerName = host
        }
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(on: loop, configuration: established, id: id, logger: logger)
        } catch {
            try? await channel.close()
            throw error
        }
        let watch = PostgresCommitWatch()
        do {
            try await loop.submit {
                let handler = PostgresCommitWatchHandler(watch: watch)
                let pipeline = channel.pipeline.syncOperations
                if let tls = try? pipeline.handler(type: NIOSSLClientHandler.self) {
                    try pipeline.addHandler(handler, position: .after(tls))
                } else {
                    try pipeline.addHandler(handler, position: .first)
                }
            }.get()
        } catch {
            try? await connection.close()
            throw error
        }
        return (connection, watch)
    }

    private static func isIPAddress(_ host: String) -> Bool {
        (try? SocketAddress(ipAddress: host, port: 0)) != nil
    }
}

/// The message boundaries of one direction of the protocol after start-up: a type byte, then a 4-byte big-endian
/// length that counts itself.
struct PostgresFraming {
    /// The type whose first body byte the callback gets (a `ReadyForQuery`'s status).
    let peek: UInt8?
    private var headerBytes = 0
    private var type: UInt8 = 0
    private var length: UInt32 = 0
    private var skip = 0
    private var peeking = false
    init(peek: UInt8? = nil) { self.peek = peek }

    /// No message of the protocol after start-up comes near it (PostgreSQL's own limit on a message is 1 GiB).
    static let maximumLength: UInt32 = 1 << 30

    /// Calls `message` with each message's type (and the first body byte of a ``peek`` message), false if a length
    /// cannot be a message's or `message` refused a type.
    mutating func feed(_ buffer: ByteBuffer, _ message: (UInt8, UInt8?) -> Bool) -> Bool {
        let bytes = buffer.readableBytesView
        var index = bytes.startIndex
        while index < bytes.endIndex {
            if peeking {
                peeking = false
                skip -= 1
                guard message(type, bytes[index]) else { return false }
                index += 1
                continue
            }
            if skip > 0 {
                let step = min(skip, bytes.endIndex - index)
                index += step
                skip -= step
                continue
            }
            let byte = bytes[index]
            index += 1
            if headerBytes == 0 { type = byte } else { length = length << 8 | UInt32(byte) }
            headerBytes += 1
            guard headerBytes == 5 else { continue }
            guard length >= 4, length <= Self.maximumLength else { return false }
            skip = Int(length) - 4
            (headerBytes, length) = (0, 0)
            if type == peek, skip > 0 {
                peeking = true
            } else {
                guard message(type, nil) else { return false }
            }
        }
        return true
    }
}

private final class PostgresCommitWatchHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let watch: PostgresCommitWatch
    private var incoming = PostgresFraming(peek: PostgresCommitWatch.readyForQuery)
    private var outgoing = PostgresFraming()
    private var watching = true
    /// The current cycle (up to its `ReadyForQuery`) has seen a `CommandComplete`, an `ErrorResponse`, and an error
    /// after a `CommandComplete`.
    private var completed = false
    private var failed = false
    private var failedAfterCompletion = false

    init(watch: PostgresCommitWatch) { self.watch = watch }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if watching, !incoming.feed(unwrapInboundIn(data), received) { lost() }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if watching, !outgoing.feed(unwrapOutboundIn(data), sent) { lost() }
        context.write(data, promise: promise)
    }

    private func sent(_ type: UInt8, _: UInt8?) -> Bool {
        guard PostgresCommitWatch.frontendTypes.contains(type) else { return false }
        if type == UInt8(ascii: "S") || type == UInt8(ascii: "Q") || type == UInt8(ascii: "F") { watch.requested() }
        return true
    }

    private func received(_ type: UInt8, _ first: UInt8?) -> Bool {
        guard PostgresCommitWatch.backendTypes.contains(type) else { return false }
        switch type {
        case UInt8(ascii: "C"): completed = true
        case UInt8(ascii: "E"):
            failed = true
            if completed { failedAfterCompletion = true }
        case PostgresCommitWatch.readyForQuery:
            watch.ready(status: first, error: failed, afterCompletion: failedAfterCompletion)
            (completed, failed, failedAfterCompletion) = (false, false, false)
        default: break
        }
        return true
    }

    /// A connection that closed before the watch joined it has nothing to confirm.
    func handlerAdded(context: ChannelHandlerContext) {
        if !context.channel.isActive { watch.stop(.closed) }
    }

    /// postgres-nio closes a connection it can no longer use (an error after a statement's `CommandComplete`, a FATAL
    /// one): from that moment the connection is done here, before its channel is inactive (a TLS close takes a
    /// while), so that the pool does not hand it on.
    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        watch.stop(.closed)
        context.close(mode: mode, promise: promise)
    }

    func channelInactive(context: ChannelHandlerContext) {
        watch.stop(.closed)
        context.fireChannelInactive()
    }

    private func lost() {
        watching = false
        watch.stop(.lostFraming)
    }
}
