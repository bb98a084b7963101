import Auth
import Billing
import Entitlements
import Foundation
import Ledger
import Logging
import Storage
import Webhooks

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

/// Erasure's hook, filled by the ledger, subscriptions, billing, webhooks and the stickers: in the erasure transaction
/// the erased account's tokens are forfeited, its subscription ended, its provider purchases unbound, its address
/// redacted from webhook bodies, its purchase requests cancelled, and its own stickers, their uses and files erased.
struct ErasureOfLedgerAndStickers: AccountErasureHook {
    let ledger: Ledger
    let subscriptions: SubscriptionMachine
    let stickerContent: StickerContentService
    func accountErased(userID: String, at: Date, executor: any SQLExecutor) async throws {
        // The subscription first: it takes the user's ledger locks before its row, as every subscription change does.
        try await subscriptions.accountErased(executor, userID: userID, now: at)
        try await BillingService.accountErased(executor, userID: userID)
        try await WebhookService.accountErased(executor, userID: userID)
        try await ledger.forfeitAll(executor, userID: userID)
        try await StickerService.cancelRequests(executor, ledger: ledger, userID: userID, now: at)
        try await stickerContent.accountErased(executor, userID: userID)
    }
}

/// A profile's deletion hook, filled by Entitlements: its pending purchase requests are cancelled, their tokens released.
struct PurchaseRequestsOfDeletedProfiles: ProfileDeletionHook {
    let ledger: Ledger
    func profileDeleted(userID: String, profileID: String, at: Date, executor: any SQLExecutor) async throws {
        try await StickerService.cancelRequests(executor, ledger: ledger, userID: userID, profileID: profileID, now: at)
    }
}

/// Auth's answers about users and profiles, for the ledger and entitlements.
struct AuthDirectory: LedgerUserDirectory, AccountDirectory {
    func isActiveUser(_ userID: String, _ tx: any SQLExecutor, lock: Bool) async throws -> Bool {
        try await AuthService.isActiveUser(userID, tx, lock: lock)
    }
    func profileCount(userID: String, _ tx: any SQLExecutor) async throws -> Int { try await ProfileService.count(userID: userID, tx) }
    func snapshotProfileFragment(engine: Engine) -> SQLJoinFragment { ProfileService.snapshotFragment(engine: engine) }
    func profile(userID: String, profileID: String, _ tx: any SQLExecutor) async throws -> ProfileAccess? {
        try await ProfileService.ranked(userID: userID, profileID: profileID, tx).map { profile, rank in
            ProfileAccess(
                permissions: ProfilePermissions(profile), rank: rank, isDefault: profile.isDefault,
                monthlyTokenAllowance: profile.monthlyTokenAllowance)
        }
    }
}

/// Auth's API keys as the ledger's callers: a key holding ``scope``, its idempotency key space ``name(keyID:)``.
struct LedgerCallerKeysOfAuth: LedgerCallerKeys {
    static let scope = "ledger:write"
    static func name(keyID: String) -> String { "key:" + keyID }

    let apiKeys: APIKeyService
    func callerQuery(secret: String, now: Date) -> (sql: String, binds: [String])? {
        APIKeyService.scopedKeyQuery(secret: secret, scope: Self.scope, callerPrefix: Self.name(keyID: ""), now: now)
    }
    func keyUsed(id: String, lastUsedAt: Date?, logger: Logger) async {
        await apiKeys.touch(id: id, lastUsedAt: lastUsedAt, logger: logger)
    }
}

/// Auth's sessions, for the reads that check the session in their own statement.
struct AuthSessionRows: SessionRows {
    let auth: AuthService
    var sessionQuery: String { AuthService.checkedSessionQuery }
    var sessionsQuery: String { AuthService.checkedSessionsQuery }
    var profileRatingColumn: String { ProfileService.sessionRatingColumn }
    func check(_ row: SQLRow?, logger: Logger) async throws -> SQLRow { try await auth.checkSession(row: row, logger: logger).row }
}

/// The current plan of every user, for profile limits.
struct CatalogProfileLimits: ProfilePlanLimits {
    let subscriptions: SubscriptionStore
    func maxFamilyProfiles(userID: String, now: Date, _ tx: any SQLExecutor) async throws -> Int {
        try await subscriptions.currentPlan(userID: userID, now: now, tx).maxFamilyProfiles
    }
}

/// Auth's mail to the account's owner, for a profile's purchase request.
struct OwnerPurchaseMail: PurchaseRequestNotifier {
    let auth: AuthService
    func purchaseRequested(_ request: PurchaseRequest, profileName: String, item: String, logger: Logger) async {
        await auth.mailPurchaseRequest(
            userID: request.userId, profileName: profileName, item: item, tokens: request.tokens, logger: logger)
    }
}
