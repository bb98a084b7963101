import NIOCore
import NIOPosix
import Synchronization
import Testing

@testable import Storage

@Suite("Statement batcher")
struct StatementBatcherTests {
    /// Records every statement's keys; answers "value-<key>" for keys not starting with "missing"; "slow" takes 300 ms.
    final class Recorder: Sendable {
        let batches = Mutex<[[String]]>([])
        let running = Mutex((now: 0, most: 0))
        func run(_ keys: [String]) async throws -> [String: String] {
            running.withLock { $0.now += 1; $0.most = max($0.most, $0.now) }
            defer { running.withLock { $0.now -= 1 } }
            batches.withLock { $0.append(keys) }
            try await Task.sleep(for: .milliseconds(keys.contains("slow") ? 300 : 5))
            if keys.contains("boom") { throw Boom() }
            return Dictionary(uniqueKeysWithValues: keys.filter { !$0.hasPrefix("missing") }.map { ($0, "value-\($0)") })
        }
    }
    struct Boom: Error {}

    @Test("a lone lookup runs at once in its own statement")
    func loneLookup() async throws {
        let recorder = Recorder()
        let batcher = StatementBatcher<String, String>(maxInFlight: 2, maxBatch: 8) { try await recorder.run($0) }
        #expect(try await batcher.load("a") == "value-a")
        #expect(try await batcher.load("missing-1") == nil)
        #expect(recorder.batches.withLock { $0 } == [["a"], ["missing-1"]])
    }

    @Test("concurrent lookups share statements: each gets its own value, duplicates are asked once, at most maxInFlight run at once, batches stay within maxBatch")
    func concurrentLookupsShareStatements() async throws {
        let recorder = Recorder()
        let batcher = StatementBatcher<String, String>(maxInFlight: 2, maxBatch: 8) { try await recorder.run($0) }
        let keys = (0..<100).map { "k\($0 % 40)" } + (0..<5).map { "missing-\($0)" }
        let answers = try await withThrowingTaskGroup(of: (String, String?).self) { group in
            for key in keys { group.addTask { (key, try await batcher.load(key)) } }
            return try await group.reduce(into: [(String, String?)]()) { $0.append($1) }
        }
        #expect(answers.count == keys.count)
        for (key, value) in answers { #expect(value == (key.hasPrefix("missing") ? nil : "value-\(key)")) }
        let batches = recorder.batches.withLock { $0 }
        #expect(batches.count < keys.count, "some lookups shared a statement (\(batches.count) statements for \(keys.count) lookups)")
        #expect(batches.allSatisfy { $0.count <= 8 && Set($0).count == $0.count })
        #expect(recorder.running.withLock { $0.most } <= 2)
    }

    @Test("a failing statement fails every lookup in it, and the next statement runs normally")
    func failuresReachEveryWaiter() async throws {
        let recorder = Recorder()
        let batcher = StatementBatcher<String, String>(maxInFlight: 1, maxBatch: 64) { try await recorder.run($0) }
        // Hold the only slot so the next lookups queue up and share a statement with "boom".
        async let first = batcher.load("slow")
        try await Task.sleep(for: .milliseconds(20))
        async let a = Result(catching: { try await batcher.load("a") })
        async let boom = Result(catching: { try await batcher.load("boom") })
        #expect(try await first == "value-slow")
        let (ra, rb) = await (a, boom)
        #expect(recorder.batches.withLock { $0 }.contains { Set($0) == ["a", "boom"] })
        #expect(throws: Boom.self) { try ra.get() }
        #expect(throws: Boom.self) { try rb.get() }
        #expect(try await batcher.load("after") == "value-after")
    }
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}

@Suite("Statement batcher: where lookups resume")
struct StatementBatcherLoopTests {
    @Test("lookups asked from another event loop are handed to it, grouped per loop in order; the rest resume here")
    func lookupsResumeOnTheirOwnLoop() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 3)
        let loops = (0..<3).map { _ in group.next() }
        // (name, loop it was asked from)
        let items: [(String, (any EventLoop)?)] = [("a", loops[1]), ("b", nil), ("c", loops[0]), ("d", loops[2]), ("e", loops[1]), ("f", loops[0])]
        let split = try await loops[0].submit {
            let split = StatementBatcher<String, String>.byLoop(items, loop: \.1)
            return (split.here.map(\.0), split.elsewhere.map { ($0.0 === loops[1] ? 1 : $0.0 === loops[2] ? 2 : 0, $0.1.map(\.0)) })
        }.get()
        #expect(split.0 == ["b", "c", "f"])
        #expect(split.1.map(\.0) == [1, 2])
        #expect(split.1.map(\.1) == [["a", "e"], ["d"]])
        // Off every loop, each loop's lookups are handed to it.
        let off = StatementBatcher<String, String>.byLoop(items, loop: \.1)
        #expect(off.here.map(\.0) == ["b"])
        #expect(off.elsewhere.map { $0.1.map(\.0) } == [["a", "e"], ["c", "f"], ["d"]])
        try await group.shutdownGracefully()
    }

    /// Runs on one event loop, so its lookups are asked from there.
    actor Asker {
        let loop: any EventLoop
        init(loop: any EventLoop) { self.loop = loop }
        nonisolated var unownedExecutor: UnownedSerialExecutor { loop.executor.asUnownedSerialExecutor() }
        func ask(_ batcher: StatementBatcher<String, String>, _ key: String) async throws -> (String?, asked: Bool, resumed: Bool) {
            let asked = MultiThreadedEventLoopGroup.currentEventLoop === loop
            let value = try await batcher.load(key)
            return (value, asked, loop.inEventLoop)
        }
    }

    @Test("lookups asked from several event loops share a statement and each gets its own answer back on its loop")
    func lookupsFromEventLoops() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let recorder = StatementBatcherTests.Recorder()
        let batcher = StatementBatcher<String, String>(maxInFlight: 1, maxBatch: 64) { try await recorder.run($0) }
        let askers = (0..<2).map { _ in Asker(loop: group.next()) }
        async let first = batcher.load("slow")
        try await Task.sleep(for: .milliseconds(20))
        let answers = try await withThrowingTaskGroup(of: (String, (String?, asked: Bool, resumed: Bool)).self) { tasks in
            for index in 0..<10 { tasks.addTask { ("k\(index)", try await askers[index % 2].ask(batcher, "k\(index)")) } }
            return try await tasks.reduce(into: [:]) { $0[$1.0] = $1.1 }
        }
        #expect(try await first == "value-slow")
        #expect(answers.count == 10)
        for (key, answer) in answers {
            #expect(answer.0 == "value-\(key)")
            #expect(answer.asked && answer.resumed)
        }
        #expect(recorder.batches.withLock { $0 }.contains { $0.count > 1 }, "the loops' lookups shared a statement")
        try await group.shutdownGracefully()
    }
}
