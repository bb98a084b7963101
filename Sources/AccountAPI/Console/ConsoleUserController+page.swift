import Auth
import Billing
import Clock
import Entitlements
import Foundation
import Hummingbird
import Ledger

/// The user page: the account, tokens (balance by bucket, pending holds, history with the balance after each entry),
/// subscription, family profiles, sessions, unlocked packs and the user's audit trail.
extension ConsoleUserController {
    struct UserView {
        let chrome: Chrome; let csrf: String; let userId: String; let user: AccountLine
        let balances: [ConsolePages.BucketLine]; let balanceTotal: Int64; let buckets: [String]; let grantKey: String; let debitKey: String
        let holds: [HoldLine]; let history: [HistoryLine]; let historyNext: String?
        let subscription: SubscriptionLine; let plans: [PlanOption]
        let profiles: [ProfileLine]; let sessions: [SessionLine]; let hasSessions: Bool
        let unlockedPacks: [String]; let ownStickers: [String]; let ownStickerCount: Int; let audit: [ConsolePages.AuditLine]
        let providerEvents: [ProviderEventLine]
    }
    struct ProviderEventLine {
        let receivedAt: String; let provider: String; let type: String; let outcome: String; let detail: String
        init(_ e: BillingEvent) {
            (receivedAt, provider, type) = (ISODate.string(e.receivedAt), e.provider, e.eventType ?? e.source)
            (outcome, detail) = (e.outcome.rawValue, e.detail ?? "")
        }
    }
    struct AccountLine {
        let id: String; let email: String?; let name: String; let role: String; let verified: Bool; let createdAt: String; let deleted: Bool
        let secondFactor: Bool; let identities: String; let hasPassword: Bool
    }
    struct HoldLine { let id: String; let amount: Int64; let expiresAt: String }
    struct HistoryLine {
        let id: String; let amount: Int64; let bucket: String; let reason: String; let createdAt: String; let balanceAfter: String;
        let reversible: Bool
    }
    struct SubscriptionLine {
        let planId: String; let planName: String; let state: String; let entitled: Bool; let periodEnd: String?; let provider: String
        let hasSubscription: Bool
    }
    struct PlanOption { let id: String; let name: String }
    struct ProfileLine { let id: String; let name: String; let isDefault: Bool; let hasPIN: Bool; let locked: Bool }
    struct SessionLine { let id: String; let agent: String; let ip: String; let lastUsedAt: String }

    @Sendable func user(_ request: Request, context: AppRequestContext) async throws -> Response {
        let (op, userID) = try await target(request, context)
        let logger = context.logger
        let summary = try await auth.findUser(id: userID, logger: logger)
        let facts = try await auth.accountFacts(userID: userID, logger: logger)
        let before = request.uri.queryParameters["before"].flatMap { Int64(String($0)) }
        let history = try await ledger.history(userID: userID, limit: Self.historyPageSize, cursor: before, logger: logger)
        // An erased account keeps its id and history; what it held is forfeited, so there is nothing else to read.
        let erased = summary.deleted
        let balance =
            erased
            ? BucketBalances(bonusTokens: 0, subscriptionTokens: 0, purchasedTokens: 0, heldTokens: 0)
            : try await entitlements.tokenBalance(userID: userID, logger: logger).balances
        let lines = [
            ("bonus", balance.bonusTokens), ("subscription", balance.subscriptionTokens), ("purchased", balance.purchasedTokens),
            ("held", balance.heldTokens),
        ].map { ConsolePages.BucketLine(bucket: $0.0, amount: $0.1) }
        let sessions = try await auth.sessions(ofUser: userID, logger: logger).map {
            SessionLine(id: $0.id, agent: $0.userAgent ?? "unknown", ip: $0.ip ?? "", lastUsedAt: ISODate.string($0.lastUsedAt))
        }
        let own =
            erased
            ? []
            : try await content.stickers(
                userID: userID, packID: Sticker.customPackID, viewer: ContentViewer(profileID: nil, maxRating: nil), logger: logger
            ).stickers.map(\.name)
        var audit = AuditQuery()
        (audit.userID, audit.limit) = (userID, 20)
        let view = UserView(
            chrome: Chrome(summary.user.email.isEmpty ? "Erased user" : summary.user.email, op), csrf: op.csrf, userId: userID,
            user: AccountLine(
                id: userID, email: summary.user.email.isEmpty ? nil : summary.user.email, name: summary.user.name, role: summary.user.role,
                verified: summary.user.emailVerified, createdAt: ISODate.string(summary.createdAt), deleted: summary.deleted,
                secondFactor: facts.secondFactor, identities: facts.identities.joined(separator: ", "), hasPassword: facts.hasPassword),
            balances: lines, balanceTotal: balance.bonusTokens &+ balance.subscriptionTokens &+ balance.purchasedTokens,
            buckets: Bucket.allCases.map(\.rawValue), grantKey: FreshID.uuid(), debitKey: FreshID.uuid(),
            holds: erased
                ? []
                : try await ledger.pendingHolds(userID: userID, logger: logger).map {
                    HoldLine(id: $0.id, amount: $0.amount, expiresAt: ISODate.string($0.expiresAt))
                },
            history: history.entries.map(Self.historyLine),
            historyNext: history.nextCursor.map { "/console/users/\(ConsoleLinks.segment(userID))?before=\($0)" },
            subscription: Self.subscriptionLine(try await entitlements.subscriptionView(userID: userID, logger: logger)),
            plans: catalog.plans.map { PlanOption(id: $0.id, name: $0.name) },
            profiles: try await profiles.available(userID: userID, logger: logger).map {
                ProfileLine(id: $0.profile.id, name: $0.profile.name, isDefault: $0.profile.isDefault, hasPIN: $0.profile.hasPin, locked: $0.isLocked)
            },
            sessions: sessions, hasSessions: !sessions.isEmpty,
            unlockedPacks: summary.deleted
                ? []
                : try await stickers.packs(for: userID, maxRating: nil, logger: logger).filter { !$0.isLocked && $0.pack.isPremium }.map(\.pack.name),
            ownStickers: Array(own.prefix(50)), ownStickerCount: own.count,
            audit: try await auth.auditTrail(audit, logger: logger).entries.map(ConsolePages.AuditLine.init),
            providerEvents: try await billing.events(userID: userID, provider: nil, limit: 20, before: nil, logger: logger).map(
                ProviderEventLine.init))
        return pages.page("user", view)
    }

    static func historyLine(_ e: HistoryEntry) -> HistoryLine {
        HistoryLine(
            id: e.id, amount: e.amount, bucket: e.bucket ?? "", reason: e.reason, createdAt: ISODate.string(e.createdAt),
            balanceAfter: e.balanceAfter.map(String.init) ?? "", reversible: e.reason != "reversal")
    }

    static func subscriptionLine(_ view: SubscriptionView) -> SubscriptionLine {
        SubscriptionLine(
            planId: view.plan.id, planName: view.plan.name, state: view.subscription?.status.rawValue ?? "none (free plan)",
            entitled: view.isEntitled, periodEnd: view.subscription.map { ISODate.string($0.currentPeriodEnd) },
            provider: view.subscription?.provider.rawValue ?? "", hasSubscription: view.subscription != nil)
    }
}
