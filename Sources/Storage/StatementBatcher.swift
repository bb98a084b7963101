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
                state.pending.append(Waiter(key: key, continuation: continuation))
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
            do {
                let values = try await run(keys)
                for waiter in batch { waiter.continuation.resume(returning: values[waiter.key]) }
            } catch {
                for waiter in batch { waiter.continuation.resume(throwing: error) }
            }
            batch = state.withLock { state in
                let next = takeBatch(&state)
                if next.isEmpty { state.inFlight -= 1 }
                return next
            }
        }
    }

    private func takeBatch(_ state: inout State) -> [Waiter] {
        let count = min(state.pending.count, maxBatch)
        let batch = Array(state.pending.prefix(count))
        state.pending.removeFirst(count)
        return batch
    }
}
