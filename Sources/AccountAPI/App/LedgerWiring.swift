import Auth
import Entitlements
import Foundation
import Ledger
import Logging
import ServiceLifecycle
import Storage

/// Verification's welcome-token hook, filled by the ledger: once per user (the `welcome_grants` row), as a
/// bonus-bucket grant in the same transaction.
struct LedgerWelcomeTokenGrant: WelcomeTokenGrant {
    let ledger: Ledger
    func grantWelcomeTokens(userID: String, amountTokens: Int, at: Date, executor: any SQLExecutor) async throws -> Int {
        let granted = try await RecordedWelcomeTokenGrant().grantWelcomeTokens(userID: userID, amountTokens: amountTokens, at: at, executor: executor)
        if granted > 0 { _ = try await ledger.grant(executor, userID: userID, amountTokens: Int64(granted), bucket: .bonus, reason: "welcome") }
        return granted
    }
}

/// Erasure's hook, filled by the ledger: the erased account's tokens are forfeited in the erasure transaction.
struct LedgerErasureHook: AccountErasureHook {
    let ledger: Ledger
    func accountErased(userID: String, at: Date, executor: any SQLExecutor) async throws {
        try await ledger.forfeitAll(executor, userID: userID)
    }
}

/// Background ledger work, on one node at a time (database lease): releases expired holds, expires lapsed
/// bonus lots, drips yearly plans' monthly tokens, and purges idempotency records past retention and idle attempt budgets.
struct LedgerSweeper: Service {
    let database: any Database
    let ledger: Ledger
    let subscriptions: SubscriptionStore
    let idempotency: IdempotencyStore
    let auth: AuthService
    let clock: any TimeSource
    let intervalSeconds: Double
    let logger: Logger
    let lease: JobLease

    init(database: any Database, ledger: Ledger, subscriptions: SubscriptionStore, idempotency: IdempotencyStore, auth: AuthService, clock: any TimeSource,
         intervalSeconds: Double, logger: Logger) {
        self.auth = auth
        self.database = database
        self.ledger = ledger
        self.subscriptions = subscriptions
        self.idempotency = idempotency
        self.clock = clock
        self.intervalSeconds = intervalSeconds
        self.logger = logger
        self.lease = JobLease(name: "ledger-sweeper", holder: UUID().uuidString, ttlSeconds: max(30, intervalSeconds * 3))
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
                do { _ = try await sweepOnce() } catch is CancellationError { return } catch {
                    logger.warning("ledger sweep failed", metadata: ["error": "\(error)"])
                }
            }
        }
    }

    /// One pass; returns nil when another node holds the lease.
    func sweepOnce() async throws -> (holds: Int, drips: Int, purged: Int)? {
        let now = clock.now()
        guard try await database.transaction(logger: logger, { try await lease.acquire($0, now: now) }) else { return nil }
        let holds = try await ledger.expireHolds(database, limit: 500, logger: logger)
        let drips = try await monthlyDrip(now: now)
        let purged = try await database.transaction(logger: logger) { try await idempotency.purge($0, limit: 1000) }
        _ = try await auth.purgeAttemptBudgets(limit: 1000, logger: logger)
        return (holds, drips, purged)
    }

    /// Yearly plans receive `monthlyTokens` each month of their period: month k of a period starts a
    /// ledger period keyed by (period start, k), which the ledger applies exactly once.
    func monthlyDrip(now: Date) async throws -> Int {
        let rows = try await database.withConnection(logger: logger) { tx in
            try await tx.query(
                "SELECT user_id, plan_id, current_period_start_ms FROM subscriptions WHERE status IN ('trialing', 'active', 'grace', 'canceled') AND current_period_end_ms > ? LIMIT 500",
                [now])
        }
        var started = 0
        for row in rows {
            guard let plan = subscriptions.catalog.plan(id: try row.string("plan_id")), plan.id.hasSuffix("_yearly") else { continue }
            let start = try row.date("current_period_start_ms")
            let month = Calendar(identifier: .gregorian).dateComponents([.month], from: start, to: now).month ?? 0
            let userID = try row.string("user_id")
            let key = month == 0 ? "period:\(start.epochMilliseconds)" : "period:\(start.epochMilliseconds):month:\(month)"
            let done = try await database.transaction(logger: logger) { tx in
                try await ledger.startPeriod(
                    tx, userID: userID, periodKey: key, planID: plan.id, monthlyTokens: Int64(plan.monthlyTokens), maxRolloverTokens: Int64(plan.maxRollover))
            }
            if done { started += 1 }
        }
        return started
    }
}
