import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import Synchronization
import TestSupport
import Testing

@testable import Storage

/// `PostgresBatchedStatement` against the suite's PostgreSQL (it exists only there).
@Suite("PostgreSQL batched statements")
struct PostgresBatchedStatementTests {
    /// Answers "value-<key>" for each key not starting with "missing"; a batch with "boom" divides by zero; "slow"
    /// sleeps 300 ms, "stall" 20 s. The marker lets a test find the lanes' backends in `pg_stat_activity`.
    static let sql = """
        SELECT /* batched-statement-test */ k, 'value-' || k AS v, CAST(? AS BIGINT) AS tag,
          1 / (CASE WHEN k = 'boom' THEN 0 ELSE 1 END) AS ok,
          (CASE WHEN k = 'slow' THEN (SELECT 1 FROM pg_sleep(0.3)) WHEN k = 'stall' THEN (SELECT 1 FROM pg_sleep(20)) ELSE 1 END) AS slept
        FROM unnest(string_to_array(?, ',')) AS t(k) WHERE k NOT LIKE 'missing%'
        """

    /// Records every statement's keys.
    final class Recorder: Sendable {
        let batches = Mutex<[[String]]>([])
        func prepare(_ keys: [String]) -> (binds: [SQLValue], finish: @Sendable ([SQLRow]) throws -> [String: String]) {
            batches.withLock { $0.append(keys) }
            return (
                [.int(7), .text(keys.joined(separator: ","))],
                { rows in
                    var found: [String: String] = [:]
                    for row in rows where try row.int("tag") == 7 { found[try row.string("k")] = try row.string("v") }
                    return found
                }
            )
        }
    }

    static func withStatement(
        loops: [any EventLoop]? = nil,
        _ body: @Sendable (PostgresBatchedStatement<String, String>, Recorder, Storage.PostgresDatabase) async throws -> Void
    ) async throws {
        try await TestDatabase.with(.postgres) { database, _ in
            let postgres = try #require(database as? Storage.PostgresDatabase)
            let recorder = Recorder()
            let made: PostgresBatchedStatement<String, String>? = postgres.batchedStatement(
                sql: sql, maxBatch: 8, logger: TestDatabase.logger, loops: loops ?? [MultiThreadedEventLoopGroup.singleton.next()],
                prepare: { recorder.prepare($0) })
            let statement = try #require(made)
            try await body(statement, recorder, postgres)
        }
    }

    @Test("cells read like the pool's: every common type, extremes and NULL")
    func columnTypes() async throws {
        guard TestDatabase.engines.contains(.postgres) else { return }
        try await TestDatabase.with(.postgres) { database, _ in
            let postgres = try #require(database as? Storage.PostgresDatabase)
            let sql = StorageContractTests.typedSQL + ", k FROM unnest(string_to_array(?, ',')) AS t(k)"
            let made: PostgresBatchedStatement<String, SQLRow>? = postgres.batchedStatement(
                sql: sql, maxBatch: 8, logger: TestDatabase.logger, loops: [MultiThreadedEventLoopGroup.singleton.next()],
                prepare: { keys in
                    ([.text(keys.joined(separator: ","))], { rows in Dictionary(uniqueKeysWithValues: try rows.map { (try $0.string("k"), $0) }) })
                })
            let statement = try #require(made)
            let row = try #require(try await statement.load("a"))
            for (column, expected) in StorageContractTests.typedValues { #expect(row[column] == expected, "\(column)") }
            await statement.close()
        }
    }

    @Test("a lone lookup runs at once; a key without a row is nil")
    func loneLookup() async throws {
        guard TestDatabase.engines.contains(.postgres) else { return }
        try await Self.withStatement { statement, recorder, _ async throws in
            #expect(try await statement.load("a") == "value-a")
            #expect(try await statement.load("missing-1") == nil)
            #expect(recorder.batches.withLock { $0 } == [["a"], ["missing-1"]])
            #expect(statement.connectionsOpened == 1)
        }
    }

    @Test("concurrent lookups share statements: each gets its own value, duplicates are asked once, batches stay within maxBatch")
    func concurrentLookupsShareStatements() async throws {
        guard TestDatabase.engines.contains(.postgres) else { return }
        try await Self.withStatement { statement, recorder, _ in
            // Hold the lane with a slow statement so that the rest queue up behind it.
            async let first = statement.load("slow")
            try await Task.sleep(for: .milliseconds(50))
            let keys = (0..<100).map { "k\($0 % 40)" } + (0..<5).map { "missing-\($0)" }
            let answers = try await withThrowingTaskGroup(of: (String, String?).self) { group in
                for key in keys { group.addTask { (key, try await statement.load(key)) } }
                return try await group.reduce(into: [(String, String?)]()) { $0.append($1) }
            }
            #expect(try await first == "value-slow")
            #expect(answers.count == keys.count)
            for (key, value) in answers { #expect(value == (key.hasPrefix("missing") ? nil : "value-\(key)")) }
            let batches = recorder.batches.withLock { $0 }
            #expect(batches.count < keys.count / 4, "lookups shared statements (\(batches.count) statements for \(keys.count) lookups)")
            #expect(batches.allSatisfy { $0.count <= 8 && Set($0).count == $0.count })
        }
    }

    @Test("a failing statement fails every lookup in it, and the next statement runs normally")
    func failuresReachEveryWaiter() async throws {
        guard TestDatabase.engines.contains(.postgres) else { return }
        try await Self.withStatement { statement, recorder, _ in
            #expect(try await statement.load("warm") == "value-warm")
            // Once "slow" runs alone (a busy machine may take a while to start it), the next two usually share a statement;
            // on a loaded machine "slow" may end first and they run apart, so the scenario is tried until they share one.
            var shared = false
            for attempt in 0..<8 where !shared {
                async let first = statement.load("slow")
                while recorder.batches.withLock({ $0.filter { $0 == ["slow"] }.count }) <= attempt { try await Task.sleep(for: .milliseconds(5)) }
                let key = "a\(attempt)"
                async let a = Result(catching: { try await statement.load(key) })
                async let boom = Result(catching: { try await statement.load("boom") })
                #expect(try await first == "value-slow")
                let (ra, rb) = await (a, boom)
                #expect(throws: (any Error).self) { try rb.get() }
                shared = recorder.batches.withLock { $0 }.contains { Set($0) == [key, "boom"] }
                // The rule: a lookup fails exactly when its statement held "boom".
                if shared { #expect(throws: (any Error).self) { try ra.get() } } else { #expect(try ra.get() == "value-\(key)") }
            }
            #expect(shared, "a lookup never shared a statement with the failing one")
            #expect(try await statement.load("after") == "value-after")
            #expect(statement.connectionsOpened == 1, "a statement's error keeps the connection")
        }
    }

    @Test("a connection PostgreSQL terminates mid-statement fails its lookups with unavailable at once; the next lookup reconnects")
    func terminatedConnection() async throws {
        guard TestDatabase.engines.contains(.postgres) else { return }
        try await Self.withStatement { statement, _, postgres in
            #expect(try await statement.load("warm") == "value-warm")
            let started = ContinuousClock.now
            async let stalled = Result(catching: { try await statement.load("stall") })
            // Terminate the lane's backend once it runs the stalled statement.
            var terminated: Int64 = 0
            while terminated == 0 && ContinuousClock.now - started < .seconds(5) {
                try await Task.sleep(for: .milliseconds(20))
                terminated =
                    try await postgres.quickQuery(
                        """
                        SELECT COUNT(pg_terminate_backend(pid)) AS n FROM pg_stat_activity
                        WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active'
                          AND query LIKE '%batched-statement-test%' AND query NOT LIKE '%pg_stat_activity%'
                        """, [], logger: TestDatabase.logger
                    ).first?.int("n") ?? 0
            }
            #expect(terminated == 1)
            let outcome = await stalled
            #expect(throws: StorageError.self) { try outcome.get() }
            if case .failure(let error) = outcome, case StorageError.unavailable = error {
            } else {
                Issue.record("expected unavailable, got \(outcome)")
            }
            #expect(ContinuousClock.now - started < .seconds(10), "failed at once, not after the 20 s statement")
            #expect(try await statement.load("again") == "value-again")
            #expect(statement.connectionsOpened == 2)
        }
    }

    /// Runs on one event loop, so its lookups are asked from there.
    actor Asker {
        let loop: any EventLoop
        init(loop: any EventLoop) { self.loop = loop }
        nonisolated var unownedExecutor: UnownedSerialExecutor { loop.executor.asUnownedSerialExecutor() }
        func ask(_ statement: PostgresBatchedStatement<String, String>, _ key: String) async throws -> (String?, resumed: Bool) {
            let value = try await statement.load(key)
            return (value, loop.inEventLoop)
        }
    }

    @Test("each event loop has its own lane and connection; lookups resume on the loop they were asked from")
    func oneLanePerLoop() async throws {
        guard TestDatabase.engines.contains(.postgres) else { return }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loops = [group.next(), group.next()]
        try await Self.withStatement(loops: loops) { statement, recorder, _ in
            let askers = loops.map { Asker(loop: $0) }
            let answers = try await withThrowingTaskGroup(of: (String, (String?, resumed: Bool)).self) { tasks in
                for index in 0..<20 { tasks.addTask { ("k\(index)", try await askers[index % 2].ask(statement, "k\(index)")) } }
                return try await tasks.reduce(into: [:]) { $0[$1.0] = $1.1 }
            }
            #expect(answers.count == 20)
            for (key, answer) in answers {
                #expect(answer.0 == "value-\(key)")
                #expect(answer.resumed)
            }
            #expect(statement.connectionsOpened == 2)
            // No statement mixes the two loops' keys (even and odd indexes).
            let parities = recorder.batches.withLock { $0 }.map { Set($0.map { Int($0.dropFirst())! % 2 }) }
            #expect(parities.allSatisfy { $0.count == 1 })
        }
        try await group.shutdownGracefully()
    }

    @Test("after close, waiting and later lookups get unavailable")
    func closeFailsLookups() async throws {
        guard TestDatabase.engines.contains(.postgres) else { return }
        try await Self.withStatement { statement, _, _ async throws in
            #expect(try await statement.load("a") == "value-a")
            await statement.close()
            await #expect(throws: StorageError.self) { try await statement.load("b") }
        }
    }

    @Test("a database that cannot be reached fails lookups with unavailable, and the next lookup tries again")
    func unreachable() async throws {
        let configuration = try Storage.PostgresDatabase.configuration(url: "postgres://nobody@127.0.0.1:1/none")
        let attempts = Atomic(0)
        let statement = PostgresBatchedStatement<String, String>(
            sql: Self.sql, maxBatch: 8, loops: [MultiThreadedEventLoopGroup.singleton.next()], logger: TestDatabase.logger,
            connect: { loop in
                attempts.add(1, ordering: .relaxed)
                return try await PostgresConnection.connect(on: loop, configuration: configuration, id: 1, logger: TestDatabase.logger)
            },
            prepare: { Recorder().prepare($0) })
        for _ in 0..<2 {
            do {
                _ = try await statement.load("a")
                Issue.record("a lookup without a database answered")
            } catch StorageError.unavailable {
            } catch {
                Issue.record("expected unavailable, got \(error)")
            }
        }
        #expect(attempts.load(ordering: .relaxed) == 2)
    }
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
