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
