import Crypto
import Foundation
import Synchronization
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

/// Reads plans, subscriptions, tokens and packs in one transaction or one statement, so every answer is consistent and
/// current (no cache of data: the next request after an unlock or a plan change sees it, on any node).
public struct EntitlementService: Sendable {
    public let subscriptions: SubscriptionStore
    public let packs: StickerPackStore
    let ledger: Ledger
    let clock: any TimeSource
    let renderings = SnapshotRenderings()

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
        return assemble(
            userID: userID, subscription: subscription.map(SubscriptionTerms.init), now: now, balances: balances, premium: premium, bought: bought,
            profile: profile)
    }

    /// The same snapshot as ``snapshot(_:userID:profile:)`` from one statement, for tests and callers that want the value.
    /// With `withProfile`, the snapshot's profile is `selectedProfileID`, or the default one when none is selected or it is gone.
    public func snapshot(
        reading database: any Database, userID: String, withProfile: Bool, selectedProfileID: String?, logger: Logger
    ) async throws -> EntitlementSnapshot {
        let subject = SnapshotSubject.user(userID, withProfile: withProfile, selectedProfileID: selectedProfileID)
        guard let (_, rendered) = try await rendered(reading: database, subject: subject, logger: logger) else {
            throw StorageError.decoding(column: "id")
        }
        return rendered.snapshot
    }

    /// The snapshot of `subject`'s user, read in one statement together with the subject's own row (no transaction: one
    /// statement reads one consistent snapshot on both engines): the subscription, stored balances, held and lapsed
    /// amounts, the bought packs, the active premium catalog and the profile. nil when the subject query finds no row.
    ///
    /// The JSON and ETag are rendered once per distinct answer: ``SnapshotRenderings`` keeps, per subject, the values this
    /// statement read and what they rendered to, and reuses the rendering only when every value read now is equal (and the
    /// subscription is still on the same side of its period end). The database is read on every call, so an unlock, a plan
    /// change or a revoked session shows on the very next request, on any node.
    /// A user with an expired hold not yet released (its parts may return into lapsed lots) takes the full path.
    public func rendered(
        reading database: any Database, subject: SnapshotSubject, logger: Logger
    ) async throws -> (subject: SQLRow, snapshot: RenderedSnapshot)? {
        let now = clock.now()
        let (sql, binds) = statement(subject, now: now, engine: database.engine)
        guard let row = try await database.quickQuery(sql, binds, logger: logger).first else { return nil }
        return (row, try await render(row, now: now, withProfile: subject.withProfile, reading: database, logger: logger))
    }

    /// The statement ``rendered(reading:subject:logger:)`` runs: one row per row of the subject's query, each with the
    /// snapshot's columns read at `now` (several subjects at once work too; see `PostgresBatchedStatement`).
    public func statement(_ subject: SnapshotSubject, now: Date, engine: Engine) -> (sql: String, binds: [SQLValue]) {
        (Self.snapshotSQL(subject: subject.sql, dialect: SQLDialect(engine: engine)), binds(subject, now: now))
    }

    /// The binds of ``statement(_:now:engine:)`` alone (for callers that prepared its SQL once).
    public func binds(_ subject: SnapshotSubject, now: Date) -> [SQLValue] {
        [now.sqlValue, SQLValue.bool(subject.withProfile)] + subject.binds
    }

    /// The snapshot in one row of ``statement(_:now:engine:)`` read at `now`; the rendering of an equal earlier answer is
    /// reused (see ``rendered(reading:subject:logger:)``).
    public func render(
        _ row: SQLRow, now: Date, withProfile: Bool, reading database: any Database, logger: Logger
    ) async throws -> RenderedSnapshot {
        let userID = try row.string("id")
        // Everything the answer depends on: the columns read for it, and which side of the period end "now" is.
        var read = Self.snapshotColumns.map { row[$0] }
        read.append(SQLValue.bool(row.optionalInt("current_period_end_ms").map { now.timeIntervalSince1970 * 1000 < Double($0) } ?? false))
        let key = withProfile ? "p:" + userID : "u:" + userID
        if let hit = renderings.lookup(key, read: read) { return hit }
        let profile = try row.optionalString("profile_id").map {
            ProfilePermissions(
                id: $0, name: try row.string("profile_name"), canMakePurchases: try row.bool("profile_can_make_purchases"),
                canUseCustomContentTypes: try row.bool("profile_can_use_custom_content_types"))
        }
        guard try row.int("expired_holds") == 0 else {
            let full = try await database.readTransaction(logger: logger) { try await self.snapshot($0, userID: userID, profile: profile) }
            return try RenderedSnapshot(full)
        }
        let subscription = row.optionalString("user_id") == nil ? nil : try SubscriptionTerms(row: row)
        let balances = BucketBalances(
            bonusTokens: try row.int("bonus_balance") - row.int("lapsed"), subscriptionTokens: try row.int("subscription_balance"),
            purchasedTokens: try row.int("purchased_balance"), heldTokens: try row.int("held"))
        let bought = Set((row.optionalString("bought") ?? "").split(separator: "|").map(String.init))
        let premium = try (row.optionalString("premium") ?? "").split(separator: "|").map { entry -> StickerPack.Premium in
            let parts = entry.split(separator: " ", maxSplits: 1)
            let plans = parts.count == 2 ? try JSONDecoder().decode([String].self, from: Data(parts[1].utf8)) : []
            return StickerPack.Premium(id: String(parts[0]), includedInPlans: plans)
        }
        let rendered = try RenderedSnapshot(
            assemble(userID: userID, subscription: subscription, now: now, balances: balances, premium: premium, bought: bought, profile: profile))
        renderings.store(key, read: read, rendered: rendered)
        return rendered
    }

    /// The columns of ``snapshotSQL(subject:dialect:)`` that the answer is made of (the subject's own columns are not).
    static let snapshotColumns = [
        "user_id", "plan_id", "status", "current_period_end_ms", "bonus_balance", "subscription_balance", "purchased_balance", "held",
        "expired_holds", "lapsed", "bought", "premium", "profile_id", "profile_name", "profile_can_make_purchases", "profile_can_use_custom_content_types",
    ]

    /// What a snapshot shows of a subscription, and all the snapshot statement reads of it.
    struct SubscriptionTerms {
        let planID: String
        let status: SubscriptionStatus
        let currentPeriodEnd: Date

        init(_ subscription: Subscription) {
            (planID, status, currentPeriodEnd) = (subscription.planID, subscription.status, subscription.currentPeriodEnd)
        }

        init(row: SQLRow) throws {
            planID = try row.string("plan_id")
            guard let status = SubscriptionStatus(rawValue: try row.string("status")) else { throw StorageError.decoding(column: "status") }
            self.status = status
            currentPeriodEnd = try row.date("current_period_end_ms")
        }

        func isEntitled(at now: Date) -> Bool { status.entitles(periodEnd: currentPeriodEnd, at: now) }
    }

    /// One statement: the subject's row (`x`, whose `id` is the user) with the snapshot's columns. Binds: now, whether
    /// to read the profile, then the subject's binds.
    ///
    /// Every part is a lookup by the user's id, so its cost does not grow with the tables. On PostgreSQL, each group of
    /// lookups is one lateral index scan (the three balances in one, both hold figures in one). The profile is two
    /// left joins, the selected one by primary key and, only when there is none, the default one by its unique partial
    /// index: an earlier form that compared `p.id` with a subquery made the planner hash the whole profiles table on
    /// every statement, and a lateral union ordered by rank cost nine plan nodes per session. On PostgreSQL each of the
    /// two is a lateral subquery with `LIMIT 1`, which keeps the planner from flattening it into a plain join: flattened,
    /// the default profile was looked up for every session, its `ps.id IS NULL` checked only after the scan; in the
    /// subquery it is a one-time filter, so a session with a selected profile makes one profile lookup (callgrind: 4.8 %
    /// fewer instructions per 8-session statement). SQLite has no LATERAL; its correlated subqueries are index lookups
    /// too, and it tests a join's conditions on outer tables before scanning the inner one.
    static func snapshotSQL(subject: String, dialect: SQLDialect) -> String {
        // Built once per subject query and engine: the subject queries are a few constants (their values are binds),
        // and building the text cost microseconds per request. Bounded in case a caller builds subject SQL on the fly.
        let key = (dialect.engine == .postgres ? "p:" : "s:") + subject
        if let built = builtSnapshotSQL.withLock({ $0[key] }) { return built }
        let sql = buildSnapshotSQL(subject: subject, dialect: dialect)
        builtSnapshotSQL.withLock { if $0.count < 64 { $0[key] = sql } }
        return sql
    }

    private static let builtSnapshotSQL = Mutex<[String: String]>([:])

    private static func buildSnapshotSQL(subject: String, dialect: SQLDialect) -> String {
        let subscription = "s.user_id, s.plan_id, s.status, s.current_period_end_ms"
        let profile = "id, name, can_make_purchases, can_use_custom_content_types"
        let common = """
              CAST((SELECT COALESCE(SUM(remaining), 0) FROM ledger_lots
                 WHERE user_id = x.id AND remaining > 0 AND expires_at_ms IS NOT NULL AND expires_at_ms <= n.now_ms) AS BIGINT) AS lapsed,
              (SELECT \(dialect.joined("pack_id")) FROM pack_unlocks WHERE user_id = x.id) AS bought,
              (SELECT \(dialect.joined("id || ' ' || included_in_plans")) FROM sticker_packs WHERE is_active AND is_premium) AS premium,
              COALESCE(ps.id, pd.id) AS profile_id, COALESCE(ps.name, pd.name) AS profile_name,
              COALESCE(ps.can_make_purchases, pd.can_make_purchases) AS profile_can_make_purchases,
              COALESCE(ps.can_use_custom_content_types, pd.can_use_custom_content_types) AS profile_can_use_custom_content_types
            """
        let from = """
            FROM (SELECT CAST(? AS BIGINT) AS now_ms, CAST(? AS BOOLEAN) AS with_profile) n CROSS JOIN (\(subject)) x
            LEFT JOIN subscriptions s ON s.user_id = x.id
            """
        guard dialect.engine == .postgres else {
            let profiles = """
                LEFT JOIN family_profiles ps ON n.with_profile AND ps.id = x.selected_profile_id AND ps.user_id = x.id
                LEFT JOIN family_profiles pd ON n.with_profile AND ps.id IS NULL AND pd.user_id = x.id AND pd.is_default
                """
            return """
                SELECT x.*, \(subscription),
                  CAST((SELECT COALESCE(SUM(balance), 0) FROM ledger_accounts WHERE user_id = x.id AND bucket = 'bonus') AS BIGINT) AS bonus_balance,
                  CAST((SELECT COALESCE(SUM(balance), 0) FROM ledger_accounts WHERE user_id = x.id AND bucket = 'subscription') AS BIGINT) AS subscription_balance,
                  CAST((SELECT COALESCE(SUM(balance), 0) FROM ledger_accounts WHERE user_id = x.id AND bucket = 'purchased') AS BIGINT) AS purchased_balance,
                  CAST((SELECT COALESCE(SUM(amount), 0) FROM ledger_holds WHERE user_id = x.id AND status = 'pending' AND expires_at_ms > n.now_ms) AS BIGINT) AS held,
                  (SELECT COUNT(*) FROM ledger_holds WHERE user_id = x.id AND status = 'pending' AND expires_at_ms <= n.now_ms) AS expired_holds,
                \(common)
                \(from)
                \(profiles)
                """
        }
        return """
            SELECT x.*, \(subscription), a.bonus_balance, a.subscription_balance, a.purchased_balance, h.held, h.expired_holds,
            \(common)
            \(from)
            CROSS JOIN LATERAL (
              SELECT CAST(COALESCE(SUM(balance) FILTER (WHERE bucket = 'bonus'), 0) AS BIGINT) AS bonus_balance,
                CAST(COALESCE(SUM(balance) FILTER (WHERE bucket = 'subscription'), 0) AS BIGINT) AS subscription_balance,
                CAST(COALESCE(SUM(balance) FILTER (WHERE bucket = 'purchased'), 0) AS BIGINT) AS purchased_balance
              FROM ledger_accounts WHERE user_id = x.id) a
            CROSS JOIN LATERAL (
              SELECT CAST(COALESCE(SUM(amount) FILTER (WHERE expires_at_ms > n.now_ms), 0) AS BIGINT) AS held,
                COUNT(*) FILTER (WHERE expires_at_ms <= n.now_ms) AS expired_holds
              FROM ledger_holds WHERE user_id = x.id AND status = 'pending') h
            LEFT JOIN LATERAL (
              SELECT \(profile) FROM family_profiles WHERE n.with_profile AND id = x.selected_profile_id AND user_id = x.id LIMIT 1) ps ON TRUE
            LEFT JOIN LATERAL (
              SELECT \(profile) FROM family_profiles WHERE n.with_profile AND ps.id IS NULL AND user_id = x.id AND is_default LIMIT 1) pd ON TRUE
            """
    }

    func assemble(
        userID: String, subscription: SubscriptionTerms?, now: Date, balances: BucketBalances, premium: [StickerPack.Premium], bought: Set<String>,
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
