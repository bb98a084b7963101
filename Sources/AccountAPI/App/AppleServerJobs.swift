import AppStoreServer
import Billing
import Clock
import Foundation
import Ledger
import Logging
import ServiceLifecycle
import Storage
import Traces

/// The App Store Server API's background work: answer Apple's CONSUMPTION_REQUESTs (every node may: each request is
/// claimed by one), and with `APPLE_RECONCILE_EVERY` compare accounts' Apple purchases with Apple's records, a batch per
/// pass, on one node at a time (a database lease).
struct AppleServerJobs: NamedService {
    let dependencies: Dependencies
    let client: AppStoreServerClient
    let settings: AppleAPISettings
    let logger: Logger
    let lease = JobLease(name: "apple-reconcile", holder: FreshID.uuid(), ttlSeconds: 600)

    static let reconcileBatch = 50

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            var lastReconcile = Date.distantPast
            while !Task.isCancelled {
                // Sleep first: the first pass never races the start-up migrations.
                try await Task.sleep(for: .seconds(settings.pollSeconds))
                do {
                    _ = try await Traces.span("job.apple_consumption") {
                        try await dependencies.billing.answerConsumptionRequests(client: client, limit: 20, logger: logger)
                    }
                    if let every = settings.reconcileEverySeconds, dependencies.clock.now().timeIntervalSince(lastReconcile) >= min(every, 300) {
                        lastReconcile = dependencies.clock.now()
                        try await Traces.span("job.apple_reconcile") { try await reconcilePass(every: every) }
                    }
                } catch is CancellationError { return } catch {
                    logger.warning("App Store Server API job failed", metadata: ["error": .error(error)])
                }
            }
        }
        try? await dependencies.database.transaction(logger: logger) { try await lease.release($0) }
    }

    /// Accounts not reconciled for `every`, oldest first; one failing account does not stop the others.
    func reconcilePass(every: Double) async throws {
        let now = dependencies.clock.now()
        guard try await dependencies.database.transaction(logger: logger, { try await lease.acquire($0, now: now) }) else { return }
        let due = try await dependencies.billing.appleAccountsToReconcile(
            before: now.addingTimeInterval(-every), limit: Self.reconcileBatch, logger: logger)
        for userID in due {
            do {
                let report = try await dependencies.billing.reconcileApple(userID: userID, client: client, logger: logger)
                if !report.repairs.isEmpty {
                    logger.info("reconciled with Apple", metadata: ["user": "\(userID)", "repairs": "\(report.repairs.count)"])
                }
            } catch {
                logger.warning("reconciliation with Apple failed", metadata: ["user": "\(userID)", "error": .error(error)])
            }
        }
    }
}

extension Dependencies {
    /// `account-service billing reconcile`: one account, or every account with Apple purchases; one line per account and
    /// per repair. Refused (an error) unless the App Store Server API is configured.
    public func reconcileApple(userID: String?, logger: Logger) async throws -> [String] {
        guard let appStore else {
            throw StartupError(message: "reconciliation needs APPLE_API_KEY_ID, APPLE_API_ISSUER_ID and APPLE_API_PRIVATE_KEY_FILE")
        }
        var users = userID.map { [$0] } ?? []
        if userID == nil { users = try await billing.appleAccountsToReconcile(before: .distantFuture, limit: Int.max, logger: logger) }
        var lines: [String] = []
        for user in users {
            let report = try await billing.reconcileApple(userID: user, client: appStore, logger: logger)
            lines.append("\(user): \(report.chains) purchase chain(s), \(report.transactions) transaction(s), \(report.repairs.count) repair(s)")
            lines += report.repairs.map { "  - \($0)" }
        }
        return lines
    }
}
