import Foundation
import Logging
import NIOPosix
import PostgresNIO
import Synchronization
import TestSupport
import Testing

@testable import Storage

/// The service's own PostgreSQL pool (``PostgresPool``): grows on demand up to its maximum and never past it, hands
/// connections to waiters in order, forgets a connection the server closes, closes idle ones down to the minimum,
/// opens the minimum, and answers `unavailable` once shut down.
@Suite("PostgreSQL pool")
struct PoolSettingsTests {
    private func withPool(
        settings: PostgresPoolSettings = .server, maximum: Int, idleSeconds: Int64 = 60, _ body: (PostgresPool) async throws -> Void
    ) async throws {
        guard TestDatabase.engines.contains(.postgres) else { return }
        let handle = try await TestDatabase.create(.postgres)
        var settings = settings
        settings.maximumConnections = maximum
        let pool = PostgresPool(
            configuration: try PostgresDatabase.configuration(url: handle.url), settings: settings, idleSeconds: idleSeconds,
            logger: TestDatabase.logger)
        do {
            try await body(pool)
            pool.shutDown()
        } catch {
            pool.shutDown()
            throw error
        }
        try await handle.drop()
    }

    private static func backend(_ connection: PostgresConnection) async throws -> Int {
        for try await pid in try await connection.query("SELECT pg_backend_pid()", logger: TestDatabase.logger).decode(Int.self) { return pid }
        throw StorageError.unavailable("no row")
    }

    @Test func growsOnDemandUpToItsMaximumAndServesEveryWaiter() async throws {
        try await withPool(maximum: 4) { pool in
            let busy = Shared((now: 0, most: 0))
            let backends = Shared(Set<Int>())
            // Each holds its connection until four were in at once (the pool grew), or until 15 s from now: on a loaded
            // machine the backlog could otherwise drain before the fourth connection opened.
            let until = ContinuousClock.now + .seconds(15)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<40 {
                    group.addTask {
                        try await pool.withConnection { connection in
                            busy.withLock {
                                $0.now += 1; $0.most = max($0.most, $0.now)
                            }
                            try await waitUntil(within: until - .now, every: .milliseconds(5)) { busy.withLock { $0.most } >= 4 }
                            let pid = try await Self.backend(connection)
                            backends.withLock { _ = $0.insert(pid) }
                            _ = try await connection.query("SELECT pg_sleep(0.02)", logger: TestDatabase.logger).collect()
                            busy.withLock { $0.now -= 1 }
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(busy.withLock { $0.most } == 4)
            #expect(backends.withLock { $0.count } == 4)
            #expect(pool.openCount == 4)
        }
    }

    /// The configured maximum (`DATABASE_POOL_MAX_CONNECTIONS`) reaches the pool a database URL opens: 12 callers at
    /// once through the database run at most 3 statements at a time, on 3 backends.
    @Test func theConfiguredMaximumBoundsADatabaseOpenedFromItsURL() async throws {
        guard TestDatabase.engines.contains(.postgres) else { return }
        let handle = try await TestDatabase.create(.postgres)
        let (database, hosts) = try await DatabaseLocation.postgres(url: handle.url).open(
            leaseTimeoutSeconds: 20, pool: PostgresPoolSettings(maximumConnections: 3), logger: TestDatabase.logger)
        let pools = try #require(hosts)
        let running = Task { await pools.run() }
        defer { running.cancel() }
        let busy = Shared((now: 0, most: 0))
        let backends = Shared(Set<Int>())
        let until = ContinuousClock.now + .seconds(15)  // as above: hold until three were in at once
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<12 {
                group.addTask {
                    try await database.withConnection(logger: TestDatabase.logger) { connection in
                        busy.withLock {
                            $0.now += 1; $0.most = max($0.most, $0.now)
                        }
                        try await waitUntil(within: until - .now, every: .milliseconds(5)) { busy.withLock { $0.most } >= 3 }
                        let row = try await connection.first("SELECT pg_backend_pid() AS pid FROM pg_sleep(0.05)")
                        let pid = try #require(row).int("pid")
                        backends.withLock { _ = $0.insert(Int(pid)) }
                        busy.withLock { $0.now -= 1 }
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(busy.withLock { $0.most } == 3)
        #expect(backends.withLock { $0.count } == 3)
        #expect(pools.current.pool.openCount == 3)
        try await database.close()
        try await handle.drop()
    }

    /// A caller gets a connection of its own event loop when one is free (its query then runs without a hop to
    /// another thread); otherwise any free one at once, and, below the maximum, an open starts on its loop for later.
    @Test func callersGetConnectionsOfTheirOwnEventLoop() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 3)
        let loops = Array(group.makeIterator())
        try await withPool(maximum: 2) { pool in
            let (firstLoop, first) = try await pool.withConnection(on: loops[0]) { ($0.eventLoop, try await Self.backend($0)) }
            #expect(firstLoop === loops[0])
            // Another loop is served by the free connection at once, and one is opened on its loop meanwhile.
            #expect(try await pool.withConnection(on: loops[1]) { try await Self.backend($0) } == first)
            let second = try await Self.eventually {
                try await pool.withConnection(on: loops[1]) { $0.eventLoop === loops[1] ? try await Self.backend($0) : nil }
            }
            #expect(second != first)
            // Back on each loop: its own connection, whichever was handed back last.
            #expect(try await pool.withConnection(on: loops[0]) { try await Self.backend($0) } == first)
            #expect(try await pool.withConnection(on: loops[1]) { try await Self.backend($0) } == second)
            #expect(try await pool.withConnection(on: loops[0]) { try await Self.backend($0) } == first)
            // At the maximum a third loop takes a free connection of another loop and opens none.
            let third = try await pool.withConnection(on: loops[2]) { try await Self.backend($0) }
            #expect(third == first || third == second)
            #expect(pool.openCount == 2)
        }
        try await group.shutdownGracefully()
    }

    /// A server that refuses new connections while the open ones work (its connection limit reached): a caller on a
    /// loop without a connection is served by another loop's free one at once, not left waiting for an open that fails.
    @Test func aCallerIsServedAtOnceWhenItsLoopCannotOpenOne() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loops = Array(group.makeIterator())
        try await withPool(maximum: 4) { pool in
            let (first, name) = try await pool.withConnection(on: loops[0]) { connection in
                var name = ""
                for try await value in try await connection.query("SELECT current_database()", logger: TestDatabase.logger).decode(String.self) {
                    name = value
                }
                return (try await Self.backend(connection), name)
            }
            try await TestDatabase.executeAsAdmin("ALTER DATABASE \(name) ALLOW_CONNECTIONS false")
            for _ in 0..<3 {
                let served = try await Self.within(seconds: 10) { try await pool.withConnection(on: loops[1]) { try await Self.backend($0) } }
                #expect(served == first)
            }
            try await TestDatabase.executeAsAdmin("ALTER DATABASE \(name) ALLOW_CONNECTIONS true")
        }
        try await group.shutdownGracefully()
    }

    /// `body`'s answer once it is not nil (tried every 20 ms for 20 s).
    private static func eventually<T: Sendable>(_ body: () async throws -> T?) async throws -> T {
        for _ in 0..<1_000 {
            if let value = try await body() { return value }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw StorageError.unavailable("not within 20 s")
    }

    /// `body`'s answer, or an error after `seconds`.
    private static func within<T: Sendable>(seconds: Int, _ body: @Sendable @escaping () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(for: .seconds(seconds))
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let value = first else { throw StorageError.unavailable("not within \(seconds) s") }
            return value
        }
    }

    @Test func forgetsAConnectionTheServerClosesAndOpensAnother() async throws {
        try await withPool(maximum: 1) { pool in
            let first = try await pool.withConnection { try await Self.backend($0) }
            // Terminated while idle in the pool (an operator, a restart): the next caller gets a new backend.
            let admin = try await PostgresConnection.connect(
                configuration: pool.configuration, id: 99, logger: TestDatabase.logger)
            do {
                _ = try await admin.query("SELECT pg_terminate_backend(\(first)::INTEGER)", logger: TestDatabase.logger).collect()
                try await admin.close()
            } catch {
                try? await admin.close()
                throw error
            }
            try await waitUntil(within: .seconds(30)) { pool.openCount == 0 }
            #expect(pool.openCount == 0)
            let second = try await pool.withConnection { try await Self.backend($0) }
            #expect(second != first)
            // Closed while leased, with a caller waiting for the pool's only slot: the waiter opens a new one.
            let holding = Shared(false)
            let third = try await withThrowingTaskGroup(of: Int?.self) { group in
                group.addTask {
                    // Its statement fails (the session ends): the pool closes the connection instead of handing it on.
                    _ = try? await pool.withConnection { connection in
                        holding.withLock { $0 = true }
                        try await Task.sleep(for: .milliseconds(50))  // the waiter below queues meanwhile
                        return try await connection.query("SELECT pg_terminate_backend(pg_backend_pid())", logger: TestDatabase.logger).collect()
                    }
                    return nil
                }
                // Only once the first holds the slot: otherwise the waiter could take the open connection itself.
                try await waitUntil(within: .seconds(30), every: .milliseconds(5)) { holding.withLock { $0 } }
                group.addTask { try await pool.withConnection { try await Self.backend($0) } }
                var found: Int?
                for try await pid in group { found = found ?? pid }
                return found
            }
            #expect(third != nil && third != second)
        }
    }

    @Test func sweepClosesIdleConnectionsDownToTheMinimumAndOpensIt() async throws {
        try await withPool(settings: PostgresPoolSettings(minimumConnections: 2), maximum: 5, idleSeconds: 0) { pool in
            await pool.sweep()
            #expect(pool.openCount == 2)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<5 {
                    group.addTask {
                        try await pool.withConnection { connection -> Void in
                            _ = try await connection.query("SELECT pg_sleep(0.1)", logger: TestDatabase.logger).collect()
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(pool.openCount == 5)
            await pool.sweep()
            #expect(pool.openCount == 2)
        }
    }

    @Test func keepAliveChecksIdleConnectionsWithoutKeepingThemOpen() async throws {
        try await withPool(settings: PostgresPoolSettings(minimumConnections: 0, keepAliveSeconds: 1), maximum: 2, idleSeconds: 10) { pool in
            _ = try await pool.withConnection { try await Self.backend($0) }
            try await Task.sleep(for: .milliseconds(1_100))
            await pool.sweep()
            #expect(pool.openCount == 1, "a connection that answers the keep-alive stays")
            // Answering a keep-alive is not being used: the connection still closes once unused for `idleSeconds`.
            try await Task.sleep(for: .milliseconds(9_000))
            await pool.sweep()
            #expect(pool.openCount == 0)
        }
    }

    @Test func aCancelledWaiterLeavesTheLineAndShutdownAnswersUnavailable() async throws {
        try await withPool(maximum: 1) { pool in
            let release = AsyncStream<Void>.makeStream()
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await pool.withConnection { _ in for await _ in release.stream { break } } }
                while pool.openCount == 0 { try await Task.sleep(for: .milliseconds(5)) }
                let waiter = Task { try await pool.withConnection { _ in 1 } }
                try await Task.sleep(for: .milliseconds(20))
                waiter.cancel()
                await #expect(throws: CancellationError.self) { try await waiter.value }
                release.continuation.yield()
                try await group.waitForAll()
            }
            // The cancelled waiter was not handed the connection: the next caller gets it at once.
            #expect(try await pool.withConnection { _ in 2 } == 2)
            // A caller waiting at shutdown, and every caller after it, gets `unavailable`.
            let holding = AsyncStream<Void>.makeStream()
            let held = Shared(false)
            let holder = Task {
                try await pool.withConnection { _ in
                    held.withLock { $0 = true }
                    for await _ in holding.stream { break }
                }
            }
            while !held.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
            let late = Task { try await pool.withConnection { _ in 3 } }
            try await Task.sleep(for: .milliseconds(20))
            pool.shutDown()
            await #expect(throws: StorageError.self) { try await late.value }
            await #expect(throws: StorageError.self) { try await pool.withConnection { _ in 4 } }
            holding.continuation.yield()
            try await holder.value
            #expect(pool.openCount == 0)
        }
    }

    /// `DATABASE_LOCK_TIMEOUT_SECONDS` reaches every connection a database URL opens: a statement waiting for a row that
    /// another transaction holds fails as `locked` after the timeout, instead of waiting as long as the holder does, and
    /// the connection stays usable; migrations still wait for another process's migrations however long they take.
    @Test func aRowLockedLongerThanTheLockTimeoutFailsAsLocked() async throws {
        guard TestDatabase.engines.contains(.postgres) else { return }
        let handle = try await TestDatabase.create(.postgres)
        let (database, hosts) = try await DatabaseLocation.postgres(url: handle.url).open(
            leaseTimeoutSeconds: 20, pool: PostgresPoolSettings(maximumConnections: 1, lockTimeoutSeconds: 1), logger: TestDatabase.logger)
        let (other, otherHosts) = try await DatabaseLocation.postgres(url: handle.url).open(
            leaseTimeoutSeconds: 20, pool: PostgresPoolSettings(lockTimeoutSeconds: 0), logger: TestDatabase.logger)
        let pools = try #require(hosts), otherPools = try #require(otherHosts)
        let running = [Task { await pools.run() }, Task { await otherPools.run() }]
        defer { for task in running { task.cancel() } }
        try await database.transaction(logger: TestDatabase.logger) { tx in
            try await tx.query("CREATE TABLE rows_held (id TEXT PRIMARY KEY, n BIGINT NOT NULL)")
            try await tx.query("INSERT INTO rows_held (id, n) VALUES ('a', 0)")
        }
        // Another session holds the row (for at most 30 s, so a statement that waits for it shows as a failure, not a hang).
        let held = Shared(false), release = Shared(false)
        let holder = Task {
            try await other.transaction(logger: TestDatabase.logger) { tx in
                try await tx.query("UPDATE rows_held SET n = n + 1 WHERE id = 'a'")
                held.withLock { $0 = true }
                try await waitUntil(within: .seconds(30)) { release.withLock { $0 } }
            }
        }
        try #require(try await waitUntil { held.withLock { $0 } })
        let started = ContinuousClock.now
        let refused = await #expect(throws: StorageError.self) {
            try await database.transaction(logger: TestDatabase.logger) { try await $0.query("UPDATE rows_held SET n = n + 10 WHERE id = 'a'") }
        }
        guard case .locked = refused else { Issue.record("expected locked, got \(String(describing: refused))"); return }
        #expect(ContinuousClock.now - started < .seconds(10))
        // The same (only) connection answers at once, and its timeout is the configured one.
        let shown = try await database.withConnection(logger: TestDatabase.logger) { try await $0.first("SHOW lock_timeout") }
        #expect(try shown?.string("lock_timeout") == "1s")
        release.withLock { $0 = true }
        try await holder.value

        // Another process migrating holds the migrations' lock for longer than the timeout: this one waits for it.
        let locking = Shared(false)
        let migrating = Task {
            try await other.withConnection(logger: TestDatabase.logger) { connection in
                try await connection.query("SELECT pg_advisory_lock(7246813579) AS locked")
                locking.withLock { $0 = true }
                try await Task.sleep(for: .seconds(2))
                try await connection.query("SELECT pg_advisory_unlock(7246813579) AS unlocked")
            }
        }
        try #require(try await waitUntil { locking.withLock { $0 } })
        _ = try await database.migrate([], logger: TestDatabase.logger)
        try await migrating.value
        let after = try await database.withConnection(logger: TestDatabase.logger) { try await $0.first("SHOW lock_timeout") }
        #expect(try after?.string("lock_timeout") == "1s")
        try await database.transaction(logger: TestDatabase.logger) { try await $0.query("UPDATE rows_held SET n = n + 10 WHERE id = 'a'") }
        let row = try await database.withConnection(logger: TestDatabase.logger) { try await $0.first("SELECT n FROM rows_held WHERE id = 'a'") }
        #expect(try row?.int("n") == 11)
        try await other.close()
        try await database.close()
        try await handle.drop()
    }
}

/// A value shared by concurrent tasks.
private final class Shared<Value: Sendable>: Sendable {
    private let value: Mutex<Value>
    init(_ value: Value) { self.value = Mutex(value) }
    func withLock<T>(_ body: (inout Value) -> T) -> T { value.withLock { body(&$0) } }
}
