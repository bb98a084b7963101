import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import Synchronization

/// One PostgreSQL host's connections: one is opened when a request needs it and none is free (at most ``maximum``),
/// free ones are reused newest first, and a connection is closed when the server closes it, when it has been idle for
/// ``idleSeconds`` (down to the settings' minimum), or at shutdown. Callers beyond the maximum wait in line; the lease
/// watch (``PostgresDatabase``) bounds the wait.
///
/// Why not postgres-nio's `PostgresClient` pool (1.33.2): with a minimum of connections it traps — a precondition in its
/// `PoolStateMachine+ConnectionGroup.swift:163` fails when a request arrives while connections are closing, which a
/// PostgreSQL restart brings about (`scripts/faults.py outage` with a minimum of 20 killed the process in 4 of 7
/// runs) — and without one, every connection handed back arms an idle timer whose memory is held until its deadline
/// (about 1 KB per query for 60 s: the service's RSS grew from 44 to 167 MiB under spends). This pool keeps no timer
/// per lease: one sweep every ``sweepSeconds`` closes what idled too long, opens the minimum and runs keep-alives.
public final class PostgresPool: Sendable {
    public let configuration: PostgresConnection.Configuration
    public let settings: PostgresPoolSettings
    public let maximum: Int
    /// How long a connection above the minimum may stay unused before the sweep closes it.
    let idleSeconds: Int64
    static let sweepSeconds: Int64 = 5
    private let logger: Logger
    private let state = Mutex(State())
    private let ids = Atomic<Int>(0)

    private typealias Waiter = (id: Int, continuation: CheckedContinuation<PostgresConnection, any Error>)

    private struct State {
        var open: [PostgresConnection.ID: PostgresConnection] = [:]
        var commits: [PostgresConnection.ID: PostgresCommitWatch] = [:]
        var opening = 0
        /// Free connections, oldest first: since when each is unused, and when it was last known to answer.
        var idle: [(connection: PostgresConnection, since: NIODeadline, checked: NIODeadline)] = []
        var waiters: [Waiter] = []
        var lastWaiter = 0
        var shutDown = false
        /// Loops with an open under way for ``shouldOpenForAffinity(on:maximum:)``, and when such opens may start again.
        var affinityOpens: Set<ObjectIdentifier> = []
        var affinityPausedUntil = NIODeadline.uptimeNanoseconds(0)

        /// A free connection for a caller on `loop`: the newest one on that loop, else the newest on any loop. A query
        /// on a connection of the caller's own event loop is written, answered and resumed on the caller's thread.
        /// Without this every connection ended up on one loop and each request hopped to it and back: under spends one
        /// of two loop threads did 78 % of the service's work.
        mutating func takeFree(for loop: (any EventLoop)?) -> PostgresConnection? {
            if let loop, let index = idle.lastIndex(where: { $0.connection.eventLoop === loop && !$0.connection.isClosed }) {
                return idle.remove(at: index).connection
            }
            return takeFree()
        }

        /// Whether to open a connection on `loop` for its later callers, one having just been served from another
        /// loop: below the maximum, one such open per loop at a time, and none for ``sweepSeconds`` after an open
        /// failed (a server refusing new connections is not asked again per request).
        mutating func shouldOpenForAffinity(on loop: any EventLoop, maximum: Int) -> Bool {
            guard !shutDown, open.count + opening < maximum, NIODeadline.now() >= affinityPausedUntil,
                affinityOpens.insert(ObjectIdentifier(loop)).inserted
            else { return false }
            opening += 1
            return true
        }

        /// The newest free connection that is still open.
        mutating func takeFree() -> PostgresConnection? {
            while let free = idle.popLast() {
                if !free.connection.isClosed { return free.connection }
                open[free.connection.id] = nil
            }
            return nil
        }

        /// Whether to open one more connection: only while fewer are being opened than callers wait (a connection
        /// handed back serves a waiter sooner than a new one), and below the maximum.
        mutating func shouldOpen(maximum: Int) -> Bool {
            guard !shutDown, opening < waiters.count, open.count + opening < maximum else { return false }
            opening += 1
            return true
        }
    }

    public init(
        configuration: PostgresConnection.Configuration, settings: PostgresPoolSettings = PostgresPoolSettings(), idleSeconds: Int64 = 60,
        logger: Logger
    ) {
        self.configuration = configuration
        self.settings = settings
        maximum = settings.maximumConnections
        self.idleSeconds = idleSeconds
        self.logger = logger
    }

    /// Runs `body` with a connection of this pool, which is handed back (or, if the server closed it, forgotten) after.
    /// `loop` is the caller's event loop (where its task runs), whose connections it prefers.
    public func withConnection<T: Sendable>(
        on loop: (any EventLoop)? = MultiThreadedEventLoopGroup.currentEventLoop, _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        let connection = try await acquire(for: loop)
        do {
            let value = try await body(connection)
            release(connection)
            return value
        } catch {
            // A server error may be the last thing a connection says (a FATAL one: terminated, shutting down), and
            // postgres-nio closes the channel in the same event-loop turn that failed the query: let that turn end
            // before looking at whether the connection is still open.
            try? await connection.eventLoop.submit {}.get()
            // A connection whose commit watch stopped (the connection closed, or the watch lost count) is not reused either.
            if Self.mustNotReuse(after: error) || commitWatch(of: connection)?.isStopped == true {
                // Its close handler frees the slot (and opens another for a waiter).
                Self.close(connection)
                throw error
            }
            release(connection)
            throw error
        }
    }

    /// Whether a connection that failed this way must be closed rather than reused:
    /// - anything but an ordinary statement error: the connection broke, the server ended the session (a FATAL
    ///   error, 57P0x: terminated, shutting down; 08xxx), or a query was cancelled half-way. PostgreSQL says FATAL
    ///   before it closes the socket, and a connection handed on in between fails its next caller;
    /// - a statement PostgreSQL could not parse or plan (class 42: a table, column or function missing — the schema
    ///   changing under the service, as while migrations run next to the first requests; 26000). It may have failed
    ///   while postgres-nio was preparing it, and postgres-nio remembers a failed preparation on that connection:
    ///   every later call of that statement there fails the same way, even once the schema is there (seen: a
    ///   sweeper's statement prepared before the migrations had made its table failed on that connection for the rest
    ///   of its life).
    static func mustNotReuse(after error: any Error) -> Bool {
        guard let error = error as? PSQLError else { return false }
        guard error.code == .server, let state = error.serverInfo?[.sqlState] else { return true }
        if let severity = error.serverInfo?[.severity], severity == "FATAL" || severity == "PANIC" { return true }
        return state.hasPrefix("42") || state == "26000" || state.hasPrefix("08") || state.hasPrefix("57P")
    }

    /// What confirms the implicit commits on one of this pool's connections.
    func commitWatch(of connection: PostgresConnection) -> PostgresCommitWatch? {
        state.withLock { $0.commits[connection.id] }
    }

    /// Connections open now and those being opened (tests and metrics).
    public var openCount: Int { state.withLock { $0.open.count + $0.opening } }

    private func acquire(for loop: (any EventLoop)?) async throws -> PostgresConnection {
        let (free, openHere) = try state.withLock { state -> (PostgresConnection?, Bool) in
            guard !state.shutDown else { throw StorageError.unavailable("the database pool is shut down") }
            guard let free = state.takeFree(for: loop) else { return (nil, false) }
            guard let loop, free.eventLoop !== loop else { return (free, false) }
            return (free, state.shouldOpenForAffinity(on: loop, maximum: maximum))
        }
        if openHere, let loop { openInBackground(on: loop, forAffinity: true) }
        if let free { return free }
        return try await wait(for: loop)
    }

    /// Waits in line for a connection handed back or newly opened; a caller whose wait is cancelled leaves the line.
    private func wait(for loop: (any EventLoop)?) async throws -> PostgresConnection {
        let id = state.withLock { state in
            state.lastWaiter += 1
            return state.lastWaiter
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<PostgresConnection, any Error>) in
                // Decided again under the lock: a connection may have been handed back since the first look.
                let (now, open) = state.withLock { state -> (Result<PostgresConnection, any Error>?, Bool) in
                    if Task.isCancelled { return (.failure(CancellationError()), false) }
                    if state.shutDown { return (.failure(StorageError.unavailable("the database pool is shut down")), false) }
                    if let free = state.takeFree(for: loop) { return (.success(free), false) }
                    state.waiters.append((id, continuation))
                    return (nil, state.shouldOpen(maximum: maximum))
                }
                if let now { continuation.resume(with: now) }
                if open { openInBackground(on: loop) }
            }
        } onCancel: {
            let waiter = state.withLock { state in state.waiters.firstIndex { $0.id == id }.map { state.waiters.remove(at: $0) } }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Opens a connection for a slot already counted in `opening`. It goes to the first waiter (or the idle list); if it
    /// cannot be opened, the first waiter gets the error at once (an outage answers 503 now, not at the lease timeout).
    /// It lives on `loop` (a caller's, so that later leases there find it), else on the group's loops in turn.
    /// `forAffinity`: opened by ``State/shouldOpenForAffinity(on:maximum:)``.
    private func openInBackground(on loop: (any EventLoop)? = nil, forAffinity: Bool = false) {
        Task { await self.open(on: loop, forAffinity: forAffinity) }
    }

    private func open(on loop: (any EventLoop)?, forAffinity: Bool) async {
        let connection: PostgresConnection
        let commits: PostgresCommitWatch
        do {
            (connection, commits) = try await PostgresCommitWatch.connect(
                on: loop ?? MultiThreadedEventLoopGroup.singleton.next(), configuration: configuration, id: ids.add(1, ordering: .relaxed).newValue,
                logger: logger)
        } catch {
            let (waiter, again) = state.withLock { state -> (Waiter?, Bool) in
                state.opening -= 1
                if forAffinity, let loop {
                    state.affinityOpens.remove(ObjectIdentifier(loop))
                    state.affinityPausedUntil = .now() + .seconds(Self.sweepSeconds)
                }
                // With connections open, callers wait for one to come back (the lease watch bounds the wait); with none,
                // nothing will: the first caller gets the error now (an outage answers 503 at once, not at the timeout).
                guard state.open.isEmpty, !state.waiters.isEmpty else { return (nil, false) }
                let waiter = state.waiters.removeFirst()
                return (waiter, state.shouldOpen(maximum: maximum))
            }
            waiter?.continuation.resume(throwing: error)
            if again { openInBackground() }
            return
        }
        let shutDown = state.withLock { state in
            state.opening -= 1
            if forAffinity, let loop { state.affinityOpens.remove(ObjectIdentifier(loop)) }
            if !state.shutDown {
                state.open[connection.id] = connection
                state.commits[connection.id] = commits
            }
            return state.shutDown
        }
        if shutDown { return Self.close(connection) }
        connection.closeFuture.whenComplete { [self] _ in closed(connection.id) }
        release(connection)
    }

    /// Closes a connection, keeping it alive until its channel has closed (postgres-nio asserts that a connection is
    /// closed before it is released).
    private static func close(_ connection: PostgresConnection) {
        connection.close().whenComplete { _ in withExtendedLifetime(connection) {} }
    }

    /// The server (or this pool) closed a connection: its slot is free, whether it was idle or leased (a leased one's
    /// work may be stuck on it; the lease watch answers its caller).
    private func closed(_ id: PostgresConnection.ID) {
        let open = state.withLock { state -> Bool in
            state.commits[id] = nil
            guard state.open.removeValue(forKey: id) != nil else { return false }
            state.idle.removeAll { $0.connection.id == id }
            return state.shouldOpen(maximum: maximum)
        }
        if open { openInBackground() }
    }

    /// Hands a connection to the first waiter, or back to the idle list (`since`: unused since then, for a connection
    /// that only answered a keep-alive).
    private func release(_ connection: PostgresConnection, unusedSince since: NIODeadline? = nil) {
        enum Then { case nothing, hand(Waiter), close }
        let then = state.withLock { state -> Then in
            // Closed already (its slot was freed then), or closing now (its close handler frees it).
            guard state.open[connection.id] != nil, !connection.isClosed else { return .nothing }
            if state.shutDown {
                state.open[connection.id] = nil
                return .close
            }
            if !state.waiters.isEmpty { return .hand(state.waiters.removeFirst()) }
            let now = NIODeadline.now()
            state.idle.append((connection, since ?? now, now))
            return .nothing
        }
        switch then {
        case .nothing: break
        case .hand(let waiter): waiter.continuation.resume(returning: connection)
        case .close: Self.close(connection)
        }
    }

    /// Sweeps every ``sweepSeconds`` until cancelled, then shuts the pool: waiters get `unavailable`, idle connections
    /// close now and leased ones when handed back.
    public func run() async {
        while !Task.isCancelled {
            await sweep()
            try? await Task.sleep(for: .seconds(Self.sweepSeconds))
        }
        shutDown()
    }

    func shutDown() {
        let (waiters, idle) = state.withLock { state in
            state.shutDown = true
            defer { state.waiters = []; state.idle = [] }
            for free in state.idle { state.open[free.connection.id] = nil }
            return (state.waiters, state.idle)
        }
        for waiter in waiters { waiter.continuation.resume(throwing: StorageError.unavailable("the database pool is shut down")) }
        for free in idle { Self.close(free.connection) }
    }

    /// Closes connections idle longer than ``idleSeconds`` beyond the minimum, tops the pool up to the minimum, and
    /// checks connections idle longer than the keep-alive period with `SELECT 1` (one that does not answer within
    /// ``PostgresHosts/probeDeadlineSeconds`` is closed).
    func sweep() async {
        let now = NIODeadline.now()
        let (stale, checks, missing) = state.withLock { state in
            var stale: [PostgresConnection] = []
            var closable = max(0, state.open.count - settings.minimumConnections)
            // Oldest first: the newest are reused first, so the oldest have idled longest.
            state.idle.removeAll { free in
                guard closable > 0, now - free.since >= .seconds(idleSeconds) else { return false }
                closable -= 1
                state.open[free.connection.id] = nil
                stale.append(free.connection)
                return true
            }
            var checks: [(connection: PostgresConnection, since: NIODeadline)] = []
            if settings.keepAliveSeconds > 0 {
                state.idle.removeAll { free in
                    guard now - free.checked >= .seconds(settings.keepAliveSeconds) else { return false }
                    checks.append((free.connection, free.since))
                    return true
                }
            }
            let missing = state.shutDown ? 0 : max(0, min(settings.minimumConnections, maximum) - state.open.count - state.opening)
            state.opening += missing
            return (stale, checks, missing)
        }
        for connection in stale { Self.close(connection) }
        // Opened in the background: a host that does not answer never holds the sweep (or shutdown) up.
        for _ in 0..<missing { openInBackground() }
        // At once, each within its deadline: the idle connections being checked are out of reach meanwhile.
        await withTaskGroup(of: Void.self) { group in
            for (connection, since) in checks {
                group.addTask { [self] in
                    let answered = await PostgresHosts.withinDeadline { [logger] in
                        do {
                            for try await _ in try await connection.query("SELECT 1", logger: logger) {}
                            return true
                        } catch {
                            return false
                        }
                    }
                    if answered { release(connection, unusedSince: since) } else { Self.close(connection) }
                }
            }
        }
    }
}
