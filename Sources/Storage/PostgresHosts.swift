import Foundation
import Logging
import NIOPosix
import PostgresNIO
import Synchronization

/// The PostgreSQL servers `DATABASE_URL` names, in order, and which one takes the requests: the primary. A URL with
/// several hosts (`postgres://user@db1:5432,db2:5432/accounts?target_session_attrs=read-write`, as libpq writes it)
/// lets the service follow a failover without a restart: after a failure that may mean the primary moved (a refused or
/// closed connection, a read-only server), every host is asked on a fresh connection whether it is a writable primary,
/// and the first that is (in URL order) takes the requests from then on. The request that met the failure answers 503
/// `unavailable` at once; nothing is retried behind the caller's back (a write whose outcome is unknown must not run
/// twice: callers retry with their idempotency keys). One host: nothing of this runs.
public final class PostgresHosts: Sendable {
    public struct Host: Sendable {
        public let name: String
        public let pool: PostgresPool
        public var connection: PostgresConnection.Configuration { pool.configuration }

        public init(name: String, pool: PostgresPool) { (self.name, self.pool) = (name, pool) }
    }

    public let hosts: [Host]
    private let primary = Atomic<Int>(0)
    private let probes = Mutex<Probes>(Probes())
    private let logger: Logger
    /// Probes start at most this often while failures keep coming.
    static let probeIntervalSeconds = 0.25

    private struct Probes {
        var running: Task<Int?, Never>?
        var lastFinished = ContinuousClock.now - .seconds(1)
    }

    public init(hosts: [Host], logger: Logger) {
        precondition(!hosts.isEmpty, "at least one host")
        self.hosts = hosts
        self.logger = logger
    }

    public var current: Host { hosts[primary.load(ordering: .relaxed)] }
    public var isMultiHost: Bool { hosts.count > 1 }

    /// Runs every host's pool (the application runs this as a service).
    public func run() async {
        await withDiscardingTaskGroup { group in
            for host in hosts { group.addTask { await host.pool.run() } }
        }
    }

    /// Finds the primary now (start-up, before migrations); concurrent callers share one probe. False when no host is a
    /// writable primary.
    @discardableResult
    public func locate() async -> Bool {
        guard isMultiHost else { return true }
        let task = probes.withLock { probes in
            if let running = probes.running { return running }
            let task = Task { await self.probe() }
            probes.running = task
            return task
        }
        let found = await task.value
        probes.withLock { probes in
            if probes.running == task {
                probes.running = nil
                probes.lastFinished = .now
            }
        }
        guard let found else {
            logger.warning("no PostgreSQL host is a writable primary", metadata: ["hosts": "\(hosts.map(\.name))"])
            return false
        }
        let before = primary.exchange(found, ordering: .relaxed)
        if before != found { logger.warning("PostgreSQL primary moved", metadata: ["from": "\(hosts[before].name)", "to": "\(hosts[found].name)"]) }
        return true
    }

    /// A request failed in a way that may mean the primary moved: probe in the background (at most every
    /// ``probeIntervalSeconds``), so the next requests go to wherever the primary is.
    func suspect(_ error: any Error) {
        guard isMultiHost, Self.mayMeanTheHostMoved(error) else { return }
        let due = probes.withLock { $0.running == nil && $0.lastFinished.duration(to: .now) > .seconds(Self.probeIntervalSeconds) }
        if due { Task { await locate() } }
    }

    static func mayMeanTheHostMoved(_ error: any Error) -> Bool {
        switch error {
        case StorageError.unavailable: return true
        case let error as PSQLError:
            guard let state = error.serverInfo?[.sqlState] else { return true }
            return state == "25006" || state.hasPrefix("08") || ["57P01", "57P02", "57P03"].contains(state)
        default: return false
        }
    }

    /// How long one host may take to answer a probe (connecting and the query) before it counts as not the primary.
    static let probeDeadlineSeconds = 3.0

    /// Asks every host at once, each on a fresh connection and within ``probeDeadlineSeconds`` (a host that froze after
    /// the handshake never holds a probe up: its answer is abandoned); the first writable primary in URL order wins.
    private func probe() async -> Int? {
        let logger = self.logger
        return await withTaskGroup(of: (Int, Bool).self) { group in
            for (index, host) in hosts.enumerated() {
                group.addTask { (index, await Self.withinDeadline { await Self.isWritablePrimary(host, index: index, logger: logger) }) }
            }
            var writable: [Int] = []
            for await (index, ok) in group where ok { writable.append(index) }
            return writable.min()
        }
    }

    /// `work`'s answer, or false once the deadline passes (the work is cancelled and left to end by itself).
    static func withinDeadline(_ work: @escaping @Sendable () async -> Bool) async -> Bool {
        let answer = OneAnswer()
        return await withCheckedContinuation { continuation in
            answer.waiting(continuation)
            let task = Task { answer.give(await work()) }
            Task {
                try? await Task.sleep(for: .seconds(probeDeadlineSeconds))
                task.cancel()
                answer.give(false)
            }
        }
    }

    /// The first of two answers resumes the waiter; the other is dropped.
    final class OneAnswer: Sendable {
        private let continuation = Mutex<CheckedContinuation<Bool, Never>?>(nil)
        func waiting(_ waiter: CheckedContinuation<Bool, Never>) { continuation.withLock { $0 = waiter } }
        func give(_ answer: Bool) { continuation.withLock { $0.take() }?.resume(returning: answer) }
    }

    static func isWritablePrimary(_ host: Host, index: Int, logger: Logger) async -> Bool {
        do {
            let connection = try await PostgresConnection.connect(
                on: MultiThreadedEventLoopGroup.singleton.any(), configuration: host.connection, id: 900_000 + index, logger: logger)
            var writable = false
            do {
                let rows = try await connection.query(
                    "SELECT pg_is_in_recovery() AS standby, current_setting('transaction_read_only') AS read_only", logger: logger)
                for try await (standby, readOnly) in rows.decode((Bool, String).self) { writable = !standby && readOnly == "off" }
            } catch {}
            try? await connection.close()
            return writable
        } catch {
            return false
        }
    }
}
