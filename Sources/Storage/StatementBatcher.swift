import NIOCore
import NIOPosix
import Synchronization

/// Lets concurrent lookups share one statement: `load(key)` joins the lookups waiting while `maxInFlight` statements
/// are already running, and the next statement answers all of them at once (`run` gets the distinct keys, at most
/// `maxBatch`, and returns the rows it found by key). With fewer lookups in flight, one starts right away, so a lone
/// request waits for nothing.
///
/// Every statement starts after each of its lookups was asked for, so a lookup never sees data older than its
/// request: what committed before the request is in its answer, as with a statement of its own.
public final class StatementBatcher<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    public typealias Run = @Sendable ([Key]) async throws -> [Key: Value]

    private struct Waiter {
        let key: Key
        let continuation: CheckedContinuation<Value?, any Error>
        /// Where the lookup was asked from, when that was an event loop.
        let loop: (any EventLoop)?

        func answer(_ result: Result<[Key: Value], any Error>) { continuation.resume(with: result.map { $0[key] }) }
    }

    private struct State: ~Copyable {
        var pending: [Waiter] = []
        var inFlight = 0
    }

    private let state = Mutex(State())
    private let maxInFlight: Int
    private let maxBatch: Int
    private let run: Run

    public init(maxInFlight: Int, maxBatch: Int, run: @escaping Run) {
        precondition(maxInFlight >= 1 && maxBatch >= 1)
        self.maxInFlight = maxInFlight
        self.maxBatch = maxBatch
        self.run = run
    }

    /// The value for `key` from the next statement that runs (nil: not found), or that statement's error.
    public func load(_ key: Key) async throws -> Value? {
        try await withCheckedThrowingContinuation { continuation in
            let batch: [Waiter]? = state.withLock { state in
                state.pending.append(Waiter(key: key, continuation: continuation, loop: MultiThreadedEventLoopGroup.currentEventLoop))
                guard state.inFlight < maxInFlight else { return nil }
                state.inFlight += 1
                return takeBatch(&state)
            }
            if let batch { Task { await drain(batch) } }
        }
    }

    /// Runs `batch`, then keeps taking what queued up meanwhile until nothing is pending.
    private func drain(_ first: [Waiter]) async {
        var batch = first
        while !batch.isEmpty {
            var keys: [Key] = []
            var seen = Set<Key>()
            for waiter in batch where seen.insert(waiter.key).inserted { keys.append(waiter.key) }
            let result: Result<[Key: Value], any Error>
            do { result = .success(try await run(keys)) } catch { result = .failure(error) }
            Self.resume(batch, with: result)
            batch = state.withLock { state in
                let next = takeBatch(&state)
                if next.isEmpty { state.inFlight -= 1 }
                return next
            }
        }
    }

    /// Each lookup resumes on the event loop it asked from (with NIO as the concurrency executor, that is its
    /// request's), one hop per loop. Resumed where the statement's answer arrived, every request of a batch rendered
    /// and wrote its response on that one thread while the other cores idled (a quarter of the machine in
    /// scripts/bench-entitlements); spread, entitlements served more in 11 of 12 alternating rounds, about +25 %.
    /// A lookup asked from outside an event loop resumes where the answer arrived.
    private static func resume(_ batch: [Waiter], with result: Result<[Key: Value], any Error>) {
        let (here, elsewhere) = byLoop(batch, loop: \.loop)
        for waiter in here { waiter.answer(result) }
        for (loop, waiters) in elsewhere { loop.execute { for waiter in waiters { waiter.answer(result) } } }
    }

    /// `items` split into those to handle on the current thread (no loop, or the current thread's loop) and, in order
    /// of first appearance, those of each other loop.
    static func byLoop<Item>(_ items: [Item], loop: (Item) -> (any EventLoop)?) -> (here: [Item], elsewhere: [(any EventLoop, [Item])]) {
        var here: [Item] = []
        var elsewhere: [(any EventLoop, [Item])] = []
        for item in items {
            guard let target = loop(item), !target.inEventLoop else {
                here.append(item)
                continue
            }
            if let index = elsewhere.firstIndex(where: { $0.0 === target }) {
                elsewhere[index].1.append(item)
            } else {
                elsewhere.append((target, [item]))
            }
        }
        return (here, elsewhere)
    }

    private func takeBatch(_ state: inout State) -> [Waiter] {
        let count = min(state.pending.count, maxBatch)
        let batch = Array(state.pending.prefix(count))
        state.pending.removeFirst(count)
        return batch
    }
}
