import Crypto
import Foundation
import Ledger
import Logging
import Storage

/// The selected profile's permissions, as the app layer knows them.
public struct ProfilePermissions: Codable, Sendable, Equatable {
    public let id: String
    public let name: String
    public let canMakePurchases: Bool
    public let canUseCustomContentTypes: Bool

    public init(id: String, name: String, canMakePurchases: Bool, canUseCustomContentTypes: Bool) {
        self.id = id
        self.name = name
        self.canMakePurchases = canMakePurchases
        self.canUseCustomContentTypes = canUseCustomContentTypes
    }
}

/// The seed's `FeatureAccess`, exactly.
public struct FeatureAccess: Codable, Sendable, Equatable {
    public let hasQualitySelector: Bool
    public let hasCommercialLicense: Bool
    public let hasModelSelector: Bool
    public let hasImageUpload: Bool
    public let maxFamilyProfiles: Int
    public let canCreateMoreProfiles: Bool
    public let currentProfileCount: Int
}

/// One consistent answer to "what may this user, on this profile, do right now?".
public struct EntitlementSnapshot: Codable, Sendable, Equatable {
    public struct Limits: Codable, Sendable, Equatable { public let maxFamilyProfiles: Int; public let monthlyTokens: Int; public let maxRollover: Int }
    public struct Tokens: Codable, Sendable, Equatable { public let total: Int64; public let held: Int64 }
    public let userId: String
    public let planId: String
    public let status: String
    public let periodEnd: String?
    public let features: [String: Bool]
    public let limits: Limits
    public let tokens: Tokens
    public let unlockedStickerPacks: [String]
    public let profile: ProfilePermissions?
}

/// The answer of `POST /api/entitlements/check`.
public struct CheckResult: Codable, Sendable, Equatable {
    public let allowed: Bool
    public let reason: String?
}

/// Reads plans, subscriptions, tokens and packs in one transaction, so every answer is consistent and
/// current (no cache: the next request after an unlock or a plan change sees it, on any node).
public struct EntitlementService: Sendable {
    public let subscriptions: SubscriptionStore
    public let packs: StickerPackStore
    let ledger: Ledger
    let clock: any TimeSource

    public init(subscriptions: SubscriptionStore, packs: StickerPackStore, ledger: Ledger, clock: any TimeSource) {
        self.subscriptions = subscriptions
        self.packs = packs
        self.ledger = ledger
        self.clock = clock
    }

    /// The plan's feature flags, named as in plans.json's `features`, plus the plan-level `has…` flags.
    public static func features(of plan: SubscriptionPlan) -> [String: Bool] {
        let f = plan.features
        return [
            "allStyles": f.allStyles, "familyProfiles": f.familyProfiles, "qualitySelector": f.qualitySelector, "modelSelector": f.modelSelector,
            "commercialLicense": f.commercialLicense, "prioritySupport": f.prioritySupport, "hasQualitySelector": plan.hasQualitySelector,
            "hasCommercialLicense": plan.hasCommercialLicense, "hasModelSelector": plan.hasModelSelector, "hasImageUpload": plan.hasImageUpload,
        ]
    }

    public func featureAccess(_ tx: any SQLExecutor, userID: String) async throws -> FeatureAccess {
        let plan = try await subscriptions.currentPlan(userID: userID, now: clock.now(), tx)
        let count = Int(try await tx.first("SELECT COUNT(*) AS n FROM family_profiles WHERE user_id = ?", [userID])?.optionalInt("n") ?? 0)
        return FeatureAccess(
            hasQualitySelector: plan.hasQualitySelector, hasCommercialLicense: plan.hasCommercialLicense, hasModelSelector: plan.hasModelSelector,
            hasImageUpload: plan.hasImageUpload, maxFamilyProfiles: plan.maxFamilyProfiles, canCreateMoreProfiles: count < plan.maxFamilyProfiles,
            currentProfileCount: count)
    }

    public func snapshot(_ tx: any SQLExecutor, userID: String, profile: ProfilePermissions?) async throws -> EntitlementSnapshot {
        let now = clock.now()
        let subscription = try await subscriptions.subscription(userID: userID, tx)
        let balances = try await ledger.peekBalances(tx, userID: userID)
        let bought = try await packs.unlockedIDs(tx, userID: userID)
        let premium = try await packs.all(tx, activeOnly: true).filter(\.isPremium).map { StickerPack.Premium(id: $0.id, includedInPlans: $0.includedInPlans) }
        return assemble(userID: userID, subscription: subscription, now: now, balances: balances, premium: premium, bought: bought, profile: profile)
    }

    /// The same snapshot as ``snapshot(_:userID:profile:)`` from one statement (no transaction; one statement reads
    /// one consistent snapshot on both engines): the subscription, stored balances, held and lapsed amounts, the
    /// bought packs and the active premium catalog. A user with an expired hold not yet released (its parts may
    /// return into lapsed lots) takes the full path, like every other rare case.
    /// With `withProfile`, the snapshot's profile is the session's selected one (`selectedProfileID`), or the default one
    /// when none is selected or it is gone, read in the same statement.
    public func snapshot(
        reading database: any Database, userID: String, withProfile: Bool, selectedProfileID: String?, logger: Logger
    ) async throws -> EntitlementSnapshot {
        let now = clock.now()
        let row = try await database.withConnection(logger: logger) { tx in
            try await tx.first(
                """
                SELECT s.*,
                  (SELECT COALESCE(SUM(balance), 0) FROM ledger_accounts WHERE user_id = x.uid AND bucket = 'bonus') AS bonus_balance,
                  (SELECT COALESCE(SUM(balance), 0) FROM ledger_accounts WHERE user_id = x.uid AND bucket = 'subscription') AS subscription_balance,
                  (SELECT COALESCE(SUM(balance), 0) FROM ledger_accounts WHERE user_id = x.uid AND bucket = 'purchased') AS purchased_balance,
                  (SELECT COALESCE(SUM(amount), 0) FROM ledger_holds WHERE user_id = x.uid AND status = 'pending' AND expires_at_ms > ?) AS held,
                  (SELECT COUNT(*) FROM ledger_holds WHERE user_id = x.uid AND status = 'pending' AND expires_at_ms <= ?) AS expired_holds,
                  (SELECT COALESCE(SUM(remaining), 0) FROM ledger_lots
                     WHERE user_id = x.uid AND remaining > 0 AND expires_at_ms IS NOT NULL AND expires_at_ms <= ?) AS lapsed,
                  (SELECT \(tx.dialect.joined("pack_id")) FROM pack_unlocks WHERE user_id = x.uid) AS bought,
                  (SELECT \(tx.dialect.joined("id || ' ' || included_in_plans")) FROM sticker_packs WHERE is_active AND is_premium) AS premium,
                  p.id AS profile_id, p.name AS profile_name, p.can_make_purchases AS profile_can_make_purchases,
                  p.can_use_custom_content_types AS profile_can_use_custom_content_types
                FROM (SELECT CAST(? AS TEXT) AS uid) x LEFT JOIN subscriptions s ON s.user_id = x.uid
                LEFT JOIN family_profiles p ON ? AND p.id = (
                  SELECT id FROM family_profiles WHERE user_id = x.uid AND (is_default OR id = ?) ORDER BY CASE WHEN id = ? THEN 0 ELSE 1 END LIMIT 1)
                """, [now, now, now, userID, withProfile, selectedProfileID ?? "", selectedProfileID ?? ""])
        }
        guard let row else { throw StorageError.decoding(column: "uid") }
        let profile = try row.optionalString("profile_id").map {
            ProfilePermissions(
                id: $0, name: try row.string("profile_name"), canMakePurchases: try row.bool("profile_can_make_purchases"),
                canUseCustomContentTypes: try row.bool("profile_can_use_custom_content_types"))
        }
        guard try row.int("expired_holds") == 0 else {
            return try await database.readTransaction(logger: logger) { try await snapshot($0, userID: userID, profile: profile) }
        }
        let subscription = row.optionalString("user_id") == nil ? nil : try Subscription(row: row)
        let balances = BucketBalances(
            bonusTokens: try row.int("bonus_balance") - row.int("lapsed"), subscriptionTokens: try row.int("subscription_balance"),
            purchasedTokens: try row.int("purchased_balance"), heldTokens: try row.int("held"))
        let bought = Set((row.optionalString("bought") ?? "").split(separator: "|").map(String.init))
        let premium = try (row.optionalString("premium") ?? "").split(separator: "|").map { entry -> StickerPack.Premium in
            let parts = entry.split(separator: " ", maxSplits: 1)
            let plans = parts.count == 2 ? try JSONDecoder().decode([String].self, from: Data(parts[1].utf8)) : []
            return StickerPack.Premium(id: String(parts[0]), includedInPlans: plans)
        }
        return assemble(userID: userID, subscription: subscription, now: now, balances: balances, premium: premium, bought: bought, profile: profile)
    }

    func assemble(
        userID: String, subscription: Subscription?, now: Date, balances: BucketBalances, premium: [StickerPack.Premium], bought: Set<String>,
        profile: ProfilePermissions?
    ) -> EntitlementSnapshot {
        let entitled = subscription?.isEntitled(at: now) ?? false
        let plan = (entitled ? subscription.flatMap { subscriptions.catalog.plan(id: $0.planID) } : nil) ?? subscriptions.catalog.freePlan
        let unlocked = premium.filter { !packs.isLocked(id: $0.id, isPremium: true, includedInPlans: $0.includedInPlans, plan: plan, bought: bought) }.map(\.id)
        return EntitlementSnapshot(
            userId: userID, planId: plan.id, status: entitled ? subscription!.status.rawValue : "free",
            periodEnd: entitled ? subscription.map { ISO8601DateFormatter().string(from: $0.currentPeriodEnd) } : nil, features: Self.features(of: plan),
            limits: .init(maxFamilyProfiles: plan.maxFamilyProfiles, monthlyTokens: plan.monthlyTokens, maxRollover: plan.maxRollover),
            tokens: .init(total: balances.totalTokens, held: balances.heldTokens), unlockedStickerPacks: unlocked.sorted(), profile: profile)
    }

    /// A strong ETag over the snapshot's canonical JSON.
    public static func etag(_ snapshot: EntitlementSnapshot) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let digest = SHA256.hash(data: try encoder.encode(snapshot))
        return "\"" + hexString(digest.prefix(16)) + "\""
    }

    /// Checks a feature, a pack and/or a token amount; the first refusal wins.
    public func check(
        _ tx: any SQLExecutor, userID: String, profile: ProfilePermissions?, feature: String?, packID: String?, tokens: Int64?
    ) async throws -> CheckResult {
        let plan = try await subscriptions.currentPlan(userID: userID, now: clock.now(), tx)
        if let feature {
            if feature == "customContentTypes" {
                if profile?.canUseCustomContentTypes == false { return CheckResult(allowed: false, reason: "profile_restricted") }
            } else {
                guard let enabled = Self.features(of: plan)[feature] else {
                    throw EntitlementError.invalid(["unknown feature '\(feature)'; known: \((Self.features(of: plan).keys + ["customContentTypes"]).sorted().joined(separator: ", "))"])
                }
                if !enabled { return CheckResult(allowed: false, reason: "subscription_required") }
            }
        }
        if let packID {
            guard let pack = try await packs.pack(tx, id: packID), pack.isActive else { throw EntitlementError.packNotFound }
            if packs.isLocked(pack, plan: plan, bought: try await packs.unlockedIDs(tx, userID: userID)) {
                return CheckResult(allowed: false, reason: profile?.canMakePurchases == false ? "purchase_not_allowed" : "pack_locked")
            }
        }
        if let tokens {
            guard tokens >= 1 else { throw EntitlementError.invalid(["tokens must be at least 1"]) }
            if try await ledger.peekBalances(tx, userID: userID).totalTokens < tokens { return CheckResult(allowed: false, reason: "insufficient_tokens") }
        }
        return CheckResult(allowed: true, reason: nil)
    }
}
