import Clock
import CoreMetrics
import Foundation
import Logging
import Metrics
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization
import Traces

/// Runs Argon2 off the event loops on a dedicated thread pool with a cap on work in flight, so a
/// sign-in flood neither blocks other requests nor exhausts memory. Beyond `queueLimit` waiting hashes
/// it refuses at once with `PasswordHasherError.overloaded` (answered 503 + Retry-After).
public final class PasswordHasher: Service {
    public let parameters: Argon2Parameters
    public let threads: Int
    public let queueLimit: Int
    let pool: NIOThreadPool
    let inFlight = Mutex(0)
    /// A hash of a random password, verified against for unknown emails so timing matches known ones.
    public let dummyHash: String

    public init(parameters: Argon2Parameters = .owasp, threads: Int = System.coreCount, queueLimit: Int = 256) throws {
        self.parameters = parameters
        self.threads = max(1, threads)
        self.queueLimit = queueLimit
        self.pool = NIOThreadPool(numberOfThreads: max(1, threads))
        self.dummyHash = try Argon2.hash(FreshID.uuid(), parameters: parameters)
        pool.start()
    }

    /// A hasher that never ran as a service (tools, tests) still stops its threads.
    deinit { pool.shutdownGracefully { _ in } }

    public func run() async throws {
        try? await gracefulShutdown()
        try await pool.shutdownGracefully()
    }

    /// `argon2_queue_depth` (queued or running), `argon2_wait` (time queued before a thread took the hash),
    /// `argon2_rejected` (overloaded answers).
    /// Computed: a handle made before the metrics backend is bootstrapped would stay a no-op.
    static var depthGauge: Meter { Meter(label: "argon2_queue_depth") }
    static var wait: Metrics.Timer { Metrics.Timer(label: "argon2_wait") }
    static var rejected: Counter { Counter(label: "argon2_rejected") }

    static func nanoseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
    }

    /// Hashes and verifications currently queued or running.
    public var depth: Int { inFlight.withLock { $0 } }

    public func hash(_ password: String) async throws -> String {
        let parameters = self.parameters
        return try await Traces.span("argon2.hash") { try await submit { try Argon2.hash(password, parameters: parameters) } }
    }

    public func verify(_ password: String, encoded: String) async throws -> Bool {
        try await Traces.span("argon2.verify") { try await submit { Argon2.verify(password, encoded: encoded) } }
    }

    /// True when `encoded` was made with other parameters than the current ones.
    public func needsRehash(_ encoded: String) -> Bool { Argon2.parameters(of: encoded) != parameters }

    private func submit<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        let admitted = inFlight.withLock { count -> Bool in
            guard count < queueLimit + threads else { return false }
            count += 1
            return true
        }
        guard admitted else {
            Self.rejected.increment()
            throw PasswordHasherError.overloaded
        }
        Self.depthGauge.increment()
        defer {
            inFlight.withLock { $0 -= 1 }
            Self.depthGauge.decrement()
        }
        let queued = ContinuousClock.now
        return try await pool.runIfActive {
            Self.wait.recordNanoseconds(Self.nanoseconds(ContinuousClock.now - queued))
            return try work()
        }
    }
}

public enum PasswordHasherError: Error, Sendable {
    /// Too many hashes are waiting; retry shortly.
    case overloaded
}
