import AppStoreServer
import Clock
import Entitlements
import Events
import Foundation
import Logging
import Storage

/// What one reconciliation found and did.
public struct AppleReconciliation: Sendable, Equatable {
    public var chains = 0
    public var transactions = 0
    /// One line per repair: the transaction and what it did.
    public var repairs: [String] = []
    public init() {}
}

extension BillingService {
    /// Pages of Apple's history a reconciliation reads per purchase chain, at most.
    static let reconcilePagesMax = 20

    /// Compares the account's Apple purchases with Apple's records and repairs what notifications missed (a renewal,
    /// a refund). For each purchase chain bound to the account: Get All Subscription Statuses, Get Transaction History and
    /// Get Refund History (every page), each signed transaction verified with the same chain checks as a notification, then applied through the same
    /// paths a notification takes — keyed by transaction id, so a repair happens once however many times it is found, and
    /// never again when the notification arrives late. Each repair is stored as a billing event (source `reconcile`) and
    /// audited (`apple_reconciled`), and emits the event its effect always emits, in its transaction (`refund.clawed_back`,
    /// `tokens.granted`, `subscription.updated`).
    public func reconcileApple(userID: String, client: AppStoreServerClient, logger: Logger) async throws -> AppleReconciliation {
        let verifier = try requireApple()
        let chains = try await database.withConnection(logger: logger) { tx in
            try await tx.query("SELECT external_id FROM billing_accounts WHERE provider = 'apple' AND user_id = ? ORDER BY external_id", [userID])
                .map { try $0.string("external_id") }
        }
        var report = AppleReconciliation()
        for chain in chains {
            report.chains += 1
            // The chain's latest state first (Get All Subscription Statuses; empty for a consumable's chain), then its history.
            var signed = try await client.subscriptionStatuses(chain, logger: logger).data.flatMap {
                $0.lastTransactions.map(\.signedTransactionInfo)
            }
            for refunds in [false, true] {
                var revision: String?
                for _ in 0..<Self.reconcilePagesMax {
                    let page =
                        refunds
                        ? try await client.refundHistory(chain, revision: revision, logger: logger)
                        : try await client.transactionHistory(chain, revision: revision, logger: logger)
                    signed += page.signedTransactions
                    revision = page.revision
                    if page.hasMore != true || revision == nil { break }
                }
            }
            for jws in signed {
                let (transaction, environment): (AppleTransaction, AppleEnvironment)
                do { (transaction, environment) = try await verifier.verifyTransaction(jws) } catch {
                    logger.warning("reconcile: a transaction from Apple does not verify", metadata: ["error": .error(error)])
                    continue
                }
                guard transaction.originalTransactionId == chain else { continue }
                report.transactions += 1
                let verdict = try await database.transaction(logger: logger) { tx in
                    try await repair(tx, userID: userID, transaction: transaction, environment: environment, raw: jws)
                }
                if verdict.outcome == .applied { report.repairs.append("\(transaction.transactionId): \(verdict.detail ?? "applied")") }
            }
        }
        let repairs = report.repairs.count
        try await database.transaction(logger: logger) { tx in
            try await tx.query(
                """
                INSERT INTO apple_reconciliations (user_id, reconciled_at_ms, repairs) VALUES (?, ?, ?)
                ON CONFLICT (user_id) DO UPDATE SET reconciled_at_ms = excluded.reconciled_at_ms, repairs = excluded.repairs
                """, [userID, clock.now(), repairs])
        }
        return report
    }

    /// One transaction from Apple, applied as its notification would have been (a revoked one as REFUND/REVOKE).
    func repair(
        _ tx: any SQLExecutor, userID: String, transaction: AppleTransaction, environment: AppleEnvironment, raw: String
    ) async throws -> BillingVerdict {
        // Apple was asked outside any transaction (seconds): the purchase must still be this live account's now.
        guard try await boundUser(tx, provider: "apple", externalID: transaction.originalTransactionId) == userID else {
            return BillingVerdict(outcome: .ignored, detail: "no longer bound to this account", userID: userID)
        }
        let at = Date(epochMilliseconds: transaction.signedDate ?? clock.now().epochMilliseconds)
        let refunded = transaction.revocationDate != nil
        var verdict: BillingVerdict
        if refunded {
            if let clawed = try await clawPack(
                tx, provider: "apple", sourceID: transaction.transactionId, share: transaction.revocationPercentage.map(Int64.init) ?? Share.all)
            {
                verdict = clawed
            } else if catalog.plans.contains(where: { $0.appleProductId == transaction.productId }) {
                verdict = try await applyMachine(
                    tx, provider: .apple, eventID: "refund:\(transaction.transactionId)", userID: userID, at: at,
                    .refund(periodKey: transaction.periodKey))
            } else {
                verdict = BillingVerdict(outcome: .ignored, detail: "no grant recorded for transaction \(transaction.transactionId)", userID: userID)
            }
        } else {
            verdict = try await applyAppleTransaction(tx, userID: userID, transaction: transaction, at: at)
        }
        guard verdict.outcome == .applied else { return verdict }
        let kind = refunded ? "refund" : "purchase"
        let detail = "\(kind) \(transaction.transactionId): \(verdict.detail ?? "applied")"
        if let eventID = try await claim(
            tx, provider: "apple", source: "reconcile", dedupeKey: "apple-reconcile:\(kind):\(transaction.transactionId)",
            externalID: transaction.transactionId, eventType: refunded ? "RECONCILE_REFUND" : "RECONCILE",
            originalID: transaction.originalTransactionId,
            environment: environment.rawValue, signedAt: transaction.signedDate.map(Date.init(epochMilliseconds:)), raw: raw)
        {
            try await settle(tx, eventID: eventID, verdict)
        }
        try await machine.audit.record(tx, at: clock.now(), actor: "system", action: "apple_reconciled", subject: userID, ip: nil, detail: detail)
        return verdict
    }

    /// Accounts with Apple purchases not reconciled since `before`, oldest first (the periodic job's batch).
    public func appleAccountsToReconcile(before: Date, limit: Int, logger: Logger) async throws -> [String] {
        try await database.withConnection(logger: logger) { tx in
            try await tx.query(
                """
                SELECT DISTINCT b.user_id, COALESCE(r.reconciled_at_ms, 0) AS last FROM billing_accounts b
                LEFT JOIN apple_reconciliations r ON r.user_id = b.user_id
                WHERE b.provider = 'apple' AND COALESCE(r.reconciled_at_ms, 0) < ? ORDER BY last, b.user_id LIMIT ?
                """, [before, limit]
            ).map { try $0.string("user_id") }
        }
    }
}

/// One transaction of an order, as support sees it.
public struct AppleOrderTransaction: Sendable, Equatable {
    public let transaction: AppleTransaction
    /// The account its purchase chain is bound to (nil: none yet).
    public let userID: String?
}

extension BillingService {
    /// Look Up Order ID (the order id on the customer's receipt email): Apple's transactions for it, each verified, with
    /// the account each belongs to here. nil: Apple says the order id is not valid.
    public func lookUpAppleOrder(_ orderID: String, client: AppStoreServerClient, logger: Logger) async throws -> [AppleOrderTransaction]? {
        let verifier = try requireApple()
        let order = try await client.lookUpOrder(orderID, logger: logger)
        guard order.status == 0 else { return nil }
        var found: [AppleOrderTransaction] = []
        for jws in order.signedTransactions ?? [] {
            guard let (transaction, _) = try? await verifier.verifyTransaction(jws) else { continue }
            let userID = try await database.withConnection(logger: logger) { tx in
                try await boundUser(tx, provider: "apple", externalID: transaction.originalTransactionId)
            }
            found.append(AppleOrderTransaction(transaction: transaction, userID: userID))
        }
        return found
    }
}
