import Foundation

/// A seeded mutation fuzzer for parsers of untrusted bytes, run inside the test suite (libFuzzer needs a separately
/// instrumented build of every dependency; this keeps one build). It starts from a committed corpus
/// (`Tests/FuzzCorpus/<target>/*`), mutates inputs the way libFuzzer's default mutators do (bit flips, interesting bytes
/// such as CR, LF, NUL and 0xFF, insertions, deletions, duplicated and spliced ranges, truncations) and hands each to
/// `body`, for `FUZZ_SECONDS` (default 2) or `iterationsMax`, and at least `iterationsMin` however slow the machine. A trap ends the test process: that is the failure it hunts.
/// The seed is printed so a failure can be replayed (`FUZZ_SEED`).
public struct Fuzzer: Sendable {
    public let corpus: [[UInt8]]
    public let seed: UInt64
    public let seconds: Double
    public let iterationsMax: Int
    public let iterationsMin: Int

    public init(corpus: [[UInt8]], seconds: Double? = nil, iterationsMin: Int = 0, iterationsMax: Int = 2_000_000) {
        let environment = ProcessInfo.processInfo.environment
        self.corpus = corpus.isEmpty ? [[]] : corpus
        self.seed = environment["FUZZ_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 1...UInt64.max)
        self.seconds = seconds ?? environment["FUZZ_SECONDS"].flatMap(Double.init) ?? 2
        self.iterationsMax = iterationsMax
        self.iterationsMin = iterationsMin
    }

    /// The files of `Tests/FuzzCorpus/<target>` under `root`.
    public static func corpus(_ target: String, root: URL) throws -> [[UInt8]] {
        let folder = root.appendingPathComponent("Tests/FuzzCorpus/\(target)", isDirectory: true)
        return try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted().map {
            Array(try Data(contentsOf: folder.appendingPathComponent($0)))
        }
    }

    /// Runs `body` on every corpus entry, then on mutants until the time or iteration limit; returns how many inputs ran.
    /// The loop runs on ``CPUBoundWork/executor``, not on the threads every asynchronous test shares.
    @discardableResult
    public func run(_ body: ([UInt8]) throws -> Void) async rethrows -> Int {
        try await withTaskExecutorPreference(CPUBoundWork.executor) { try loop(body) }
    }

    private func loop(_ body: ([UInt8]) throws -> Void) rethrows -> Int {
        print("fuzz seed \(seed) (FUZZ_SEED=\(seed) replays it)")
        var generator = SplitMix64(seed: seed)
        for input in corpus { try body(input) }
        let deadline = Date().addingTimeInterval(seconds)
        var count = corpus.count
        while count < iterationsMax {
            if count % 256 == 0, count >= iterationsMin, Date() >= deadline { break }
            var input = corpus[Int(generator.next() % UInt64(corpus.count))]
            for _ in 0...Int(generator.next() % 4) { mutate(&input, &generator) }
            try body(input)
            count += 1
        }
        return count
    }

    /// ``run(_:)`` for an asynchronous parser (a JWS verifier, a request through the router).
    @discardableResult
    public func runAsync(_ body: ([UInt8]) async throws -> Void) async rethrows -> Int {
        try await withTaskExecutorPreference(CPUBoundWork.executor) { try await loopAsync(body) }
    }

    private func loopAsync(_ body: ([UInt8]) async throws -> Void) async rethrows -> Int {
        print("fuzz seed \(seed) (FUZZ_SEED=\(seed) replays it)")
        var generator = SplitMix64(seed: seed)
        for input in corpus { try await body(input) }
        let deadline = Date().addingTimeInterval(seconds)
        var count = corpus.count
        while count < iterationsMax {
            if count % 16 == 0, count >= iterationsMin, Date() >= deadline { break }
            var input = corpus[Int(generator.next() % UInt64(corpus.count))]
            for _ in 0...Int(generator.next() % 4) { mutate(&input, &generator) }
            try await body(input)
            count += 1
        }
        return count
    }

    static let interesting: [UInt8] = [0x00, 0x0a, 0x0d, 0x20, 0x22, 0x2d, 0x3a, 0x3b, 0x3d, 0x7f, 0x80, 0xc3, 0xff, 0x09, 0x5c, 0x7b, 0x7d]

    func mutate(_ input: inout [UInt8], _ generator: inout SplitMix64) {
        func index(_ limit: Int) -> Int { limit <= 0 ? 0 : Int(generator.next() % UInt64(limit)) }
        switch generator.next() % 8 {
        case 0 where !input.isEmpty: input[index(input.count)] ^= UInt8(1 << index(8))
        case 1: input.insert(Self.interesting[index(Self.interesting.count)], at: index(input.count + 1))
        case 2 where !input.isEmpty: input[index(input.count)] = Self.interesting[index(Self.interesting.count)]
        case 3 where !input.isEmpty:
            let start = index(input.count)
            input.removeSubrange(start..<min(input.count, start + 1 + index(16)))
        case 4 where !input.isEmpty:
            let start = index(input.count)
            let slice = input[start..<min(input.count, start + 1 + index(32))]
            input.insert(contentsOf: slice, at: index(input.count + 1))
        case 5:
            let other = corpus[index(corpus.count)]
            guard !other.isEmpty else { return }
            let start = index(other.count)
            input.insert(contentsOf: other[start..<min(other.count, start + 1 + index(64))], at: index(input.count + 1))
        case 6 where !input.isEmpty: input.removeSubrange(index(input.count)...)
        default: input.insert(UInt8(truncatingIfNeeded: generator.next()), at: index(input.count + 1))
        }
    }
}

/// A small, fast, seedable generator (the fuzzer must replay exactly from its seed).
public struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Where CPU-bound test work runs: threads of Dispatch's own pool, not the cooperative pool every asynchronous test
/// shares (two threads on a 2-core host). A fuzz loop there held a thread for seconds at a time, and with a few of them
/// at once other tests' timers fired tens of seconds late and their database pools could not connect in time. Here the
/// kernel shares the cores between the loops and everything else. Being a task executor, the test's task (and with it
/// the current test, to which `#expect` reports) is the same one.
public enum CPUBoundWork {
    public static let executor = Executor()

    public final class Executor: TaskExecutor {
        private let queue = DispatchQueue(label: "cpu-bound-test-work", attributes: .concurrent)

        public func enqueue(_ job: consuming ExecutorJob) {
            let job = UnownedJob(job)
            let executor = asUnownedTaskExecutor()
            queue.async { job.runSynchronously(on: executor) }
        }
    }

    /// Runs `body` on ``executor`` (a test's loop over many inputs).
    public static func run<T>(_ body: () async throws -> T) async rethrows -> T {
        try await withTaskExecutorPreference(executor, operation: body)
    }
}
