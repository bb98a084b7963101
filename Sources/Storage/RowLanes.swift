import Logging
import Synchronization

/// Admission per hot row, before the connection: at most ``width`` (3) of this process's requests that will lock the same
/// rows (one user's ledger accounts, one address's attempt budget) hold a connection at once; the rest wait here, in
/// arrival order, holding nothing. Without it the requests queued on one row's lock each held a pooled connection, so
/// ten parallel requests from one account (or one IP) could fill a node's pool and starve every other account.
///
/// A lane's waiters are bounded (``waitersMax``): past that a request is refused with ``StorageError/busy(_:)`` (429)
/// instead of holding memory. A waiter that is cancelled leaves the line. Another node's requests are not seen: the row
/// lock still serializes them, each node holding at most ``width`` connections for the row.
public final class RowLanes: Sendable {
    /// The process's lanes; each owner names its keys (``user(_:)`` for an account's rows, an attempt budget's key).
    public static let shared = RowLanes()
    public let width: Int
    public let waitersMax: Int
    private let lanes = Mutex(State())

    private struct Waiter {
        let id: UInt64
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct Lane {
        var running = 0
        var waiters: [Waiter] = []
    }

    private struct State {
        var lanes: [String: Lane] = [:]
        var nextID: UInt64 = 0
    }

    /// Three, not two: with two, one user's spends lost about a tenth of their rate on PostgreSQL (the next statement is
    /// sent only once one returns); with three, as many as with no lanes (docs/performance.md).
    public init(width: Int = 3, waitersMax: Int = 256) {
        self.width = max(1, width)
        self.waitersMax = max(0, waitersMax)
    }

    /// The lane of everything that locks one account's rows (its token ledger, its profiles' holds): owners in
    /// different modules name the same lane.
    public static func user(_ id: String) -> String { "user:" + id }

    /// Runs `body` once the lane `key` has room.
    public func run<T: Sendable>(_ key: String, _ body: () async throws -> T) async throws -> T {
        try await enter(key)
        defer { leave(key) }
        return try await body()
    }

    /// How many are running and waiting in `key`'s lane (tests, metrics).
    public func occupancy(_ key: String) -> (running: Int, waiting: Int) {
        lanes.withLock { state in state.lanes[key].map { ($0.running, $0.waiters.count) } ?? (0, 0) }
    }

    private enum Admission {
        case now
        case queued
        case refused
        case cancelled
    }

    /// Takes a place when the lane has room; otherwise (when `waiter` is given) joins the line, or is refused when full.
    private func admit(_ key: String, _ waiter: Waiter?) -> Admission {
        lanes.withLock { state in
            var lane = state.lanes[key] ?? Lane()
            if lane.running < width {
                lane.running += 1
                state.lanes[key] = lane
                return .now
            }
            guard let waiter else { return .queued }
            // Under the lock the cancellation handler takes too: cancelled before this, or it finds the waiter.
            guard !Task.isCancelled else { return .cancelled }
            guard lane.waiters.count < waitersMax else { return .refused }
            lane.waiters.append(waiter)
            state.lanes[key] = lane
            return .queued
        }
    }

    private func enter(_ key: String) async throws {
        if case .now = admit(key, nil) { return }
        let id = lanes.withLock { state in
            state.nextID &+= 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                // Checked again with the waiter in hand: a place may have come free since the first look.
                switch admit(key, Waiter(id: id, continuation: continuation)) {
                case .now: continuation.resume()
                case .queued: break
                case .cancelled: continuation.resume(throwing: CancellationError())
                case .refused: continuation.resume(throwing: StorageError.busy("\(width) running and \(waitersMax) waiting for the same rows"))
                }
            }
        } onCancel: {
            let cancelled = lanes.withLock { state -> Waiter? in
                guard let index = state.lanes[key]?.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return state.lanes[key]?.waiters.remove(at: index)
            }
            cancelled?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Hands the place to the first waiter, or gives it back.
    private func leave(_ key: String) {
        let next: Waiter? = lanes.withLock { state in
            guard var lane = state.lanes[key] else { return nil }
            if lane.waiters.isEmpty {
                lane.running -= 1
                state.lanes[key] = lane.running > 0 ? lane : nil
                return nil
            }
            let first = lane.waiters.removeFirst()
            state.lanes[key] = lane
            return first
        }
        next?.continuation.resume()
    }
}

extension Database {
    /// ``transaction(isolation:logger:_:)`` once `lane` has room (``RowLanes/shared``): for a transaction that locks rows
    /// other requests of the same account or address lock too.
    @discardableResult
    public func transaction<T: Sendable>(
        lane: String, logger: Logger, _ body: @escaping @Sendable (any SQLExecutor) async throws -> T
    ) async throws -> T {
        try await RowLanes.shared.run(lane) { try await transaction(isolation: .readCommitted, logger: logger, body) }
    }
}
