import Clock
import Crypto
import Foundation
import Ledger
import Logging
import Storage
import Synchronization

/// The selected profile's permissions, as the app layer knows them.
public struct ProfilePermissions: Codable, Sendable, Equatable {
    public let id: String
    public let name: String
    public let canMakePurchases: Bool
    public let canUseCustomContentTypes: Bool
    /// The highest content rating the profile may see; nil: no maximum.
    public var maxContentRating: ContentRating?

    public init(id: String, name: String, canMakePurchases: Bool, canUseCustomContentTypes: Bool, maxContentRating: ContentRating? = nil) {
        self.maxContentRating = maxContentRating
        self.id = id
        self.name = name
        self.canMakePurchases = canMakePurchases
        self.canUseCustomContentTypes = canUseCustomContentTypes
    }
}

/// The profile a snapshot is read for, as the profile owner's fragment found it.
public enum SnapshotProfile: Sendable, Equatable {
    /// The snapshot is about the user alone (a service asking).
    case notRequested
    /// The session's profile and its place in the account's order (0 = the default profile): usable while the place is
    /// below the plan's `maxFamilyProfiles`.
    case found(ProfilePermissions, rank: Int)
    /// The session's selected profile is gone.
    case missing
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
    public struct Limits: Codable, Sendable, Equatable {
        public let maxFamilyProfiles: Int; public let monthlyTokens: Int; public let maxRollover: Int
    }
    public struct Tokens: Codable, Sendable, Equatable { public let total: Int64; public let held: Int64 }
    public let userId: String
    public let planId: String
    public let status: String
    public let periodEnd: String?
    public let features: [String: Bool]
    public let limits: Limits
    public let tokens: Tokens
    public let unlockedStickerPacks: [String]
    /// The rate card's actions this plan may use, each with the values of each attribute it may choose (``RateCard``).
    public let actions: [String: [String: [String]]]
    /// The profile the session acts as; nil when it must select one (see `profileSelectionRequired`) or for services.
    public let profile: ProfilePermissions?
    /// The session's selected profile was deleted or is beyond the plan's profile limit: the app asks the user to pick one.
    public let profileSelectionRequired: Bool
}

/// The answer of `POST /api/entitlements/check`.
public struct CheckResult: Codable, Sendable, Equatable {
    public let allowed: Bool
    public let reason: String?
    /// What the priced action asked about costs (nil when the check named none).
    public var tokens: Int64? = nil
}

/// A call of a priced action: its id, how many units and the attributes named (the rest take their defaults).
public struct PricedCall: Sendable, Equatable {
    public let id: String
    public let quantity: Int?
    public let attributes: [String: String]

    public init(id: String, quantity: Int?, attributes: [String: String]) { (self.id, self.quantity, self.attributes) = (id, quantity, attributes) }
}

/// Reads plans, subscriptions, tokens and packs in one transaction or one statement, so every answer is consistent and
/// current (no cache of data: the next request after an unlock or a plan change sees it, on any node).
public struct EntitlementService: Sendable {
    public let database: any Database
    public let subscriptions: SubscriptionStore
    public let packs: StickerPackStore
    let ledger: Ledger
    let accounts: any AccountDirectory
    public let clock: any TimeSource
    /// Mails the owner about a reservation that asks to buy (``reserve(_:_:logger:)`` with `askToBuy`).
    let notifier: (any PurchaseRequestNotifier)?
    let renderings = SnapshotRenderings()
    let readReleases = ReadReleases()

    public init(
        database: any Database, subscriptions: SubscriptionStore, packs: StickerPackStore, ledger: Ledger, accounts: any AccountDirectory,
        clock: any TimeSource, notifier: (any PurchaseRequestNotifier)? = nil
    ) {
        self.notifier = notifier
        self.database = database
        self.subscriptions = subscriptions
        self.packs = packs
        self.ledger = ledger
        self.accounts = accounts
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

    /// The seed's `FeatureAccess` for the user's current plan and profile count.
    public func featureAccess(userID: String, logger: Logger) async throws -> FeatureAccess {
        try await database.withConnection(logger: logger) { tx in
            let plan = try await subscriptions.currentPlan(userID: userID, now: clock.now(), tx)
            let count = try await accounts.profileCount(userID: userID, tx)
            return FeatureAccess(
                hasQualitySelector: plan.hasQualitySelector, hasCommercialLicense: plan.hasCommercialLicense, hasModelSelector: plan.hasModelSelector,
                hasImageUpload: plan.hasImageUpload, maxFamilyProfiles: plan.maxFamilyProfiles, canCreateMoreProfiles: count < plan.maxFamilyProfiles,
                currentProfileCount: count)
        }
    }

    /// The snapshot read with several statements in one transaction (the path for users with an expired hold to settle).
    public func snapshot(_ tx: any SQLExecutor, userID: String, profile: SnapshotProfile) async throws -> EntitlementSnapshot {
        let now = clock.now()
        let subscription = try await subscriptions.subscription(userID: userID, tx)
        let balances = try await ledger.peekBalances(tx, userID: userID)
        let bought = try await packs.unlockedIDs(tx, userID: userID)
        let premium = try await packs.all(tx, activeOnly: true).filter(\.isPremium).map {
            StickerPack.Premium(id: $0.id, includedInPlans: $0.includedInPlans, contentRating: $0.contentRating)
        }
        return assemble(
            userID: userID, subscription: subscription.map(SubscriptionTerms.init), now: now, balances: balances, premium: premium, bought: bought,
            profile: profile)
    }

    /// The same snapshot as ``snapshot(_:userID:profile:)`` from one statement, for tests and callers that want the value.
    /// With `withProfile`, the snapshot's profile is `selectedProfileID`, or the default one when none is selected or it is gone.
    public func snapshot(userID: String, withProfile: Bool, selectedProfileID: String?, logger: Logger) async throws -> EntitlementSnapshot {
        let subject = SnapshotSubject.user(userID, withProfile: withProfile, selectedProfileID: selectedProfileID)
        guard let (_, rendered) = try await rendered(subject: subject, logger: logger) else { throw StorageError.decoding(column: "id") }
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
    /// A user with an expired hold not yet released (its parts may return into lapsed lots) is answered by the full path,
    /// read-only: operators' and services' reads write nothing (the user's own reads release such holds; see
    /// ``render(_:now:withProfile:releasingExpiredHolds:logger:)``).
    public func rendered(subject: SnapshotSubject, logger: Logger) async throws -> (subject: SQLRow, snapshot: RenderedSnapshot)? {
        let now = clock.now()
        let (sql, binds) = statement(subject, now: now, engine: database.engine)
        guard let row = try await database.quickQuery(sql, binds, logger: logger).first else { return nil }
        return (row, try await render(row, now: now, withProfile: subject.withProfile, logger: logger))
    }

    /// The statement ``rendered(subject:logger:)`` runs: one row per row of the subject's query, each with the snapshot's
    /// columns read at `now` (several subjects at once work too; see `PostgresBatchedStatement`).
    func statement(_ subject: SnapshotSubject, now: Date, engine: Engine) -> (sql: String, binds: [SQLValue]) {
        (
            SnapshotStatement.sql(subject: subject.sql, engine: engine, profile: accounts.snapshotProfileFragment(engine: engine)),
            binds(subject, now: now)
        )
    }

    /// The binds of ``statement(_:now:engine:)`` alone (for callers that prepared its SQL once).
    func binds(_ subject: SnapshotSubject, now: Date) -> [SQLValue] {
        [now.sqlValue, SQLValue.bool(subject.withProfile)] + subject.binds
    }

    /// The snapshot in one row of ``statement(_:now:engine:)`` read at `now`; the rendering of an equal earlier answer is
    /// reused (see ``rendered(subject:logger:)``).
    /// With `releasingExpiredHolds` (the user's own reads), an expired hold not released yet is released first (see
    /// ``ReadReleases``); operators and services read without writing.
    func render(_ row: SQLRow, now: Date, withProfile: Bool, releasingExpiredHolds: Bool = false, logger: Logger) async throws -> RenderedSnapshot {
        let userID = try row.string("id")
        // Everything the answer depends on: the columns read for it, and which side of the period end "now" is.
        var read = SnapshotStatement.columns.map { row[$0] }
        read.append(SQLValue.bool(row.optionalInt("current_period_end_ms").map { now.timeIntervalSince1970 * 1000 < Double($0) } ?? false))
        let key = withProfile ? "p:" + userID : "u:" + userID
        if let hit = renderings.lookup(key, read: read) { return hit }
        let profile = try Self.profile(row, withProfile: withProfile)
        guard try row.int("expired_holds") == 0 else {
            // An expired hold not released yet: release it now, as the next spend would (its parts may return into lapsed
            // lots, which only the full path reads), so this user's later reads take the one-statement path. A release
            // that fails (e.g. a read-only database) leaves the answer to the full path, which counts it as released.
            if releasingExpiredHolds, readReleases.begin(userID, now: now) {
                var failed = false
                do {
                    _ = try await ledger.releaseExpiredHolds(database, userID: userID, logger: logger)
                } catch {
                    failed = true
                    logger.warning("could not release expired holds on read", metadata: ["user": "\(userID)", "error": .error(error)])
                }
                readReleases.end(userID, failed: failed, now: now)
            }
            let full = try await database.readTransaction(logger: logger) { try await self.snapshot($0, userID: userID, profile: profile) }
            return try RenderedSnapshot(full)
        }
        let subscription = row.optionalString("user_id") == nil ? nil : try SubscriptionTerms(row: row)
        let bought = Set((row.optionalString("bought") ?? "").split(separator: "|").map(String.init))
        let rendered = try RenderedSnapshot(
            assemble(
                userID: userID, subscription: subscription, now: now, balances: try Ledger.snapshotBalances(row),
                premium: try SnapshotStatement.premium(row),
                bought: bought, profile: profile))
        renderings.store(key, read: read, rendered: rendered)
        return rendered
    }

    static func profile(_ row: SQLRow, withProfile: Bool) throws -> SnapshotProfile {
        guard withProfile else { return .notRequested }
        guard let id = row.optionalString("profile_id") else { return .missing }
        let permissions = ProfilePermissions(
            id: id, name: try row.string("profile_name"), canMakePurchases: try row.bool("profile_can_make_purchases"),
            canUseCustomContentTypes: try row.bool("profile_can_use_custom_content_types"),
            maxContentRating: row.optionalString("profile_max_content_rating").map { ContentRating(text: $0) ?? .all })
        return .found(permissions, rank: Int(try row.int("profile_rank")))
    }

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

    func assemble(
        userID: String, subscription: SubscriptionTerms?, now: Date, balances: BucketBalances, premium: [StickerPack.Premium], bought: Set<String>,
        profile: SnapshotProfile
    ) -> EntitlementSnapshot {
        let entitled = subscription?.isEntitled(at: now) ?? false
        let plan = (entitled ? subscription.flatMap { subscriptions.catalog.plan(id: $0.planID) } : nil) ?? subscriptions.catalog.freePlan
        let (shown, selectionRequired): (ProfilePermissions?, Bool) =
            switch profile {
            case .notRequested: (nil, false)
            case .missing: (nil, true)
            case .found(let permissions, let rank): rank < plan.maxFamilyProfiles ? (permissions, false) : (nil, true)
            }
        // What the profile may see: packs and actions rated above its maximum are left out (as from every listing).
        let maximum = shown?.maxContentRating
        let unlocked = premium.filter {
            ContentRating.allows($0.contentRating, under: maximum)
                && !packs.isLocked(id: $0.id, isPremium: true, includedInPlans: $0.includedInPlans, plan: plan, bought: bought)
        }.map(\.id)
        return EntitlementSnapshot(
            userId: userID, planId: plan.id, status: entitled ? subscription?.status.rawValue ?? "free" : "free",
            periodEnd: entitled ? subscription.map { ISOTime.string($0.currentPeriodEnd) } : nil,
            features: Self.features(of: plan),
            limits: .init(maxFamilyProfiles: plan.maxFamilyProfiles, monthlyTokens: plan.monthlyTokens, maxRollover: plan.maxRollover),
            tokens: .init(total: balances.totalTokens, held: balances.heldTokens), unlockedStickerPacks: unlocked.sorted(),
            actions: RateCard.allowed(subscriptions.catalog, plan: plan, maxRating: maximum), profile: shown,
            profileSelectionRequired: selectionRequired)
    }

    /// Checks a feature, a pack, a priced action (its plan and profile gates, and its price as `tokens`) and/or a token
    /// amount for the user on a profile; the first refusal wins. One consistent read (a read-only transaction).
    public func check(
        userID: String, profile: ProfilePermissions?, feature: String?, packID: String?, tokens: Int64?, action: PricedCall? = nil, logger: Logger
    ) async throws -> CheckResult {
        guard feature != nil || packID != nil || tokens != nil || action != nil else {
            throw EntitlementError.invalid(["give at least one of feature, packId, action or tokens"])
        }
        return try await database.readTransaction(logger: logger) { tx in
            let (plan, period) = try await subscriptions.planAndPeriod(userID: userID, now: clock.now(), tx)
            if let feature, let refusal = try Self.featureRefusal(feature, plan: plan, profile: profile) { return refusal }
            var price: Int64?
            if let action {
                switch try RateCard.quote(
                    subscriptions.catalog, actionID: action.id, quantity: action.quantity, attributes: action.attributes, plan: plan,
                    permissions: profile)
                {
                case .success(let quote): price = quote.tokens
                case .failure(let refusal): return CheckResult(allowed: false, reason: refusal.rawValue)
                }
            }
            if let packID {
                guard let pack = try await packs.pack(tx, id: packID), pack.isActive else { throw EntitlementError.packNotFound }
                if !StickerPackStore.isVisible(pack, to: profile?.maxContentRating) {
                    return CheckResult(allowed: false, reason: Refusal.contentRestricted.rawValue)
                }
                if packs.isLocked(pack, plan: plan, bought: try await packs.unlockedIDs(tx, userID: userID)) {
                    return CheckResult(allowed: false, reason: profile?.canMakePurchases == false ? "purchase_not_allowed" : "pack_locked")
                }
            }
            if let tokens, tokens < 1 { throw EntitlementError.invalid(["tokens must be at least 1"]) }
            if let needed = tokens ?? price {
                if let profile, let remaining = try await remainingAllowance(tx, userID: userID, profileID: profile.id, period: period),
                    remaining < needed
                {
                    return CheckResult(allowed: false, reason: "allowance_exceeded", tokens: price)
                }
                if try await ledger.peekBalances(tx, userID: userID).totalTokens < needed {
                    return CheckResult(allowed: false, reason: "insufficient_tokens", tokens: price)
                }
            }
            return CheckResult(allowed: true, reason: nil, tokens: price)
        }
    }

    static func featureRefusal(_ feature: String, plan: SubscriptionPlan, profile: ProfilePermissions?) throws -> CheckResult? {
        if feature == "customContentTypes" {
            return profile?.canUseCustomContentTypes == false ? CheckResult(allowed: false, reason: "profile_restricted") : nil
        }
        guard let enabled = features(of: plan)[feature] else {
            throw EntitlementError.invalid([
                "unknown feature '\(feature)'; known: \((features(of: plan).keys + ["customContentTypes"]).sorted().joined(separator: ", "))"
            ])
        }
        return enabled ? nil : CheckResult(allowed: false, reason: "subscription_required")
    }
}

/// The releases of expired holds that reads start: at most one at a time per user in this process (parallel reads of one
/// user would otherwise each hold a connection waiting for the same account locks), and none for a minute after one
/// failed (a read-only standby during a failover, say), so reads never repeat a failing write at their own rate.
final class ReadReleases: Sendable {
    private struct State {
        var running: Set<String> = []
        var failedAt: [String: Date] = [:]
    }
    private let state = Mutex(State())
    static let backoffSeconds: Double = 60

    /// True when the caller should release `userID`'s holds now (then it calls ``end(_:failed:now:)``).
    func begin(_ userID: String, now: Date) -> Bool {
        state.withLock { state in
            if let failed = state.failedAt[userID], now.timeIntervalSince(failed) < Self.backoffSeconds { return false }
            return state.running.insert(userID).inserted
        }
    }

    func end(_ userID: String, failed: Bool, now: Date) {
        state.withLock { state in
            state.running.remove(userID)
            if failed {
                if state.failedAt.count >= 10_000 { state.failedAt.removeAll(keepingCapacity: true) }
                state.failedAt[userID] = now
            } else {
                state.failedAt[userID] = nil
            }
        }
    }
}
