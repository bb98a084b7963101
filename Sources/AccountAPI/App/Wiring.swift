import Auth
import Entitlements
import Foundation
import Ledger
import Storage

/// The protocols through which modules ask each other, filled at wiring: each answer comes from the module that owns the
/// table (users and profiles: Auth; tokens: Ledger; plans and subscriptions: Entitlements).

/// Verification's welcome-token hook, filled by the ledger: once per user (the `welcome_grants` row), as a bonus-bucket
/// grant in the same transaction.
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

/// Auth's answers about users and profiles, for the ledger and entitlements.
struct AuthDirectory: LedgerUserDirectory, AccountDirectory {
    func isActiveUser(_ userID: String, _ tx: any SQLExecutor) async throws -> Bool { try await AuthService.isActiveUser(userID, tx) }
    func profileCount(userID: String, _ tx: any SQLExecutor) async throws -> Int { try await ProfileService.count(userID: userID, tx) }
    func snapshotProfileFragment(engine: Engine) -> SQLJoinFragment { ProfileService.snapshotFragment(engine: engine) }
}

/// The current plan of every user, for profile limits.
struct CatalogProfileLimits: ProfilePlanLimits {
    let subscriptions: SubscriptionStore
    func maxFamilyProfiles(userID: String, now: Date, _ tx: any SQLExecutor) async throws -> Int {
        try await subscriptions.currentPlan(userID: userID, now: now, tx).maxFamilyProfiles
    }
}
