import Auth
import Clock
import Entitlements
import Foundation
import Ledger
import Logging
import ServiceLifecycle
import Storage
import Traces

/// Background work, on one node at a time (a database lease): each pass asks the owners to do their part — the ledger
/// releases expired holds and purges idempotency records past retention, subscriptions drip yearly plans' monthly
/// tokens, auth forgets what it keeps only for a while (attempt budgets, sign-up requests, codes, sessions, challenges, email
/// changes, audit rows; docs/operations.md "Retention"). The decisions are theirs; this only schedules.
struct BackgroundSweeper: NamedService {
    let dependencies: Dependencies
    let intervalSeconds: Double
    let logger: Logger
    let lease: JobLease

    init(dependencies: Dependencies, intervalSeconds: Double, logger: Logger) {
        self.dependencies = dependencies
        self.intervalSeconds = intervalSeconds
        self.logger = logger
        self.lease = JobLease(name: "ledger-sweeper", holder: FreshID.uuid(), ttlSeconds: max(30, intervalSeconds * 3))
    }

    func run() async throws {
        guard intervalSeconds > 0 else {
            try? await gracefulShutdown()
            return
        }
        // A graceful shutdown cancels the loop (and its sleep) at once. The first sweep waits one interval, so it
        // never races the start-up migrations (expired holds are settled on access meanwhile).
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: .seconds(intervalSeconds))
                do { _ = try await Traces.span("job.sweep") { try await sweepOnce() } } catch is CancellationError { return } catch {
                    logger.warning("background sweep failed", metadata: ["error": .error(error)])
                }
            }
        }
        // Shutting down (a rolling restart): the lease goes back, so the other nodes sweep from their next pass on.
        do { try await dependencies.database.transaction(logger: logger) { try await lease.release($0) } } catch {
            logger.warning("sweeper lease not handed back; it lapses by itself", metadata: ["error": .error(error)])
        }
    }

    static let batch = 500
    static let batchesPerPass = 10

    /// One pass; nil when another node holds the lease.
    func sweepOnce() async throws -> (holds: Int, drips: Int, purged: Int)? {
        let database = dependencies.database
        let ledger = dependencies.ledger
        guard try await database.transaction(logger: logger, { try await lease.acquire($0, now: dependencies.clock.now()) }) else { return nil }
        // A backlog (many holds expired at once) drains in one pass (the ledger's `HoldExpiry.swift`).
        let holds = try await ledger.ledger.expireHoldBacklog(database, batch: Self.batch, batches: Self.batchesPerPass, logger: logger)
        // Subscriptions due for the yearly drip drain the same way (after a migration or a restore, all are due at once).
        let drips = try await dependencies.subscriptions.dripYearlyPlans(limit: Self.batch, batches: Self.batchesPerPass, logger: logger)
        let purged = try await database.transaction(logger: logger) { try await ledger.idempotency.purge($0, limit: 1000) }
        _ = try await dependencies.auth.purgeExpired(limit: 1000, logger: logger)
        // Files of deleted stickers nothing uses any more (queued in the database; every node shares the media directory).
        try await dependencies.stickerContent.removeUnusedFiles(logger: logger, limit: Self.batch)
        return (holds, drips, purged)
    }
}
