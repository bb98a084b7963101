import Clock
import Foundation
import Ledger
import Logging
import Storage

/// Operators' changes to subscriptions, each one transaction through the ``SubscriptionMachine`` (with its audit row).
public struct SubscriptionService: Sendable {
    let database: any Database
    let machine: SubscriptionMachine
    let accounts: any AccountDirectory

    public init(database: any Database, machine: SubscriptionMachine, accounts: any AccountDirectory) {
        (self.database, self.machine, self.accounts) = (database, machine, accounts)
    }

    /// A comp (``SubscriptionMachine/comp``); answers the subscription as it is afterwards. The account must be live in
    /// the comp's own transaction (an erasure that commits first leaves nothing to comp).
    public func comp(userID: String, planID: String, periodEnd: Date?, actor: String, ip: String?, logger: Logger) async throws -> SubscriptionView {
        try await database.transaction(logger: logger) { tx in
            guard try await accounts.isActiveUser(userID, tx) else { throw LedgerError.userNotFound(userID) }
            _ = try await machine.comp(tx, userID: userID, planID: planID, periodEnd: periodEnd, actor: actor, ip: ip)
            return try await machine.store.view(userID: userID, now: machine.clock.now(), tx)
        }
    }

    /// Ends the subscription now; false when the user had none.
    public func end(userID: String, actor: String, ip: String?, logger: Logger) async throws -> Bool {
        try await database.transaction(logger: logger) { tx in try await machine.end(tx, userID: userID, actor: actor, ip: ip) }
    }

    /// The sweeper's monthly drip of yearly plans (``SubscriptionMachine/dripYearlyPlans``).
    public func dripYearlyPlans(limit: Int, batches: Int = 1, logger: Logger) async throws -> Int {
        try await machine.dripYearlyPlans(database, limit: limit, batches: batches, logger: logger)
    }
}
