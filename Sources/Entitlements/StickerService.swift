import Clock
import Events
import Foundation
import Ledger
import Logging
import Storage

/// A pack as one user sees it.
public struct PackView: Sendable, Equatable {
    public let pack: StickerPack
    public let isLocked: Bool
}

/// What an unlock did: the tokens it spent and the balances after them (nil when the pack was free to unlock).
public struct UnlockResult: Sendable, Equatable, Codable {
    public let packID: String
    public let spent: LedgerResult?
    /// For a profile that cannot make purchases: the pending request that holds the price (nothing is unlocked yet).
    public var purchaseRequest: PurchaseRequest? = nil
    /// Whether this call created the request (else it merged into a pending one).
    public var requestCreated: Bool? = nil
    /// For the owner's mail: the asking profile's and the pack's names.
    var notice: Notice? = nil

    struct Notice: Sendable, Equatable, Codable { let profileName: String; let packName: String }
}

/// Sticker packs as apps and operators use them; each call one transaction (an unlock with its spend and, with an
/// idempotency key, its stored answer; an operator change with its audit row).
public struct StickerService: Sendable {
    let database: any Database
    let packs: StickerPackStore
    let subscriptions: SubscriptionStore
    let ledger: Ledger
    let idempotency: IdempotencyStore
    let audit: any AuditTrail
    let clock: any TimeSource
    let accounts: any AccountDirectory
    let notifier: (any PurchaseRequestNotifier)?

    public init(
        database: any Database, packs: StickerPackStore, subscriptions: SubscriptionStore, ledger: Ledger, idempotency: IdempotencyStore,
        audit: any AuditTrail, clock: any TimeSource, accounts: any AccountDirectory, notifier: (any PurchaseRequestNotifier)? = nil
    ) {
        self.accounts = accounts
        self.notifier = notifier
        self.database = database
        self.packs = packs
        self.subscriptions = subscriptions
        self.ledger = ledger
        self.idempotency = idempotency
        self.audit = audit
        self.clock = clock
    }

    /// Active packs in catalog order that a profile with `maxRating` may see, each locked or not for this user.
    public func packs(for userID: String, maxRating: ContentRating?, logger: Logger) async throws -> [PackView] {
        try await database.readTransaction(logger: logger) { tx in
            let plan = try await subscriptions.currentPlan(userID: userID, now: clock.now(), tx)
            let bought = try await packs.unlockedIDs(tx, userID: userID)
            return try await packs.all(tx, activeOnly: true).filter { StickerPackStore.isVisible($0, to: maxRating) }
                .map { PackView(pack: $0, isLocked: packs.isLocked($0, plan: plan, bought: bought)) }
        }
    }

    /// Buys a pack with tokens (``StickerPackStore/unlock``): charged once, even for parallel taps.
    /// Buys a pack for the user, acting as `profile` (nil: no profile, e.g. an account without one): refused when the
    /// profile cannot make purchases; the price counts on the profile's allowance.
    public func unlock(userID: String, packID: String, profile: ProfilePermissions?, logger: Logger) async throws -> UnlockResult {
        let result = try await database.transaction(lane: Ledger.lane(userID: userID), logger: logger) { tx in
            try await unlock(tx, userID: userID, packID: packID, profile: profile)
        }
        await notify(result, logger: logger)
        return result
    }

    /// The same with an `Idempotency-Key`: a retry replays the first answer, a refusal included.
    public func unlock(
        _ request: IdempotentRequest, userID: String, packID: String, profile: ProfilePermissions?, logger: Logger
    ) async throws -> IdempotentResult<UnlockResult> {
        let result = try await idempotency.run(
            database, caller: request.caller, key: request.key, request: request.fields, lane: Ledger.lane(userID: userID), logger: logger
        ) { tx in
            try await unlock(tx, userID: userID, packID: packID, profile: profile)
        }
        if !result.replayed, case .succeeded(let unlock) = result.outcome { await notify(unlock, logger: logger) }
        return result
    }

    /// Mails the owner about a request this call created (after the commit).
    func notify(_ result: UnlockResult, logger: Logger) async {
        guard result.requestCreated == true, let request = result.purchaseRequest, let notice = result.notice else { return }
        await notifier?.purchaseRequested(request, profileName: notice.profileName, item: "the sticker pack \(notice.packName)", logger: logger)
    }

    func unlock(_ tx: any SQLExecutor, userID: String, packID: String, profile session: ProfilePermissions?) async throws -> UnlockResult {
        // The ledger's lock order before any row of the pack's or its requests: the user's accounts first, as an approval
        // takes them (``resolve(userID:requestID:as:authorise:logger:_:)``), so an unlock, an ask and an approval of the
        // same pack wait for each other instead of deadlocking.
        try await ledger.lockAccountsFirst(tx, userID: userID)
        let now = clock.now()
        let (plan, period) = try await subscriptions.planAndPeriod(userID: userID, now: now, tx)
        // The profile as it is now, in this transaction (an owner's change of its rating or purchases since the session
        // read it applies); one deleted meanwhile acts no more: its session must choose again.
        var access: ProfileAccess?
        if let session {
            access = try await accounts.profile(userID: userID, profileID: session.id, tx)
            if access == nil { throw EntitlementError.profileSelectionRequired }
        }
        let profile = access?.permissions ?? session
        if let profile, profile.maxContentRating != nil, let pack = try await packs.pack(tx, id: packID), pack.isActive {
            try StickerPackStore.requireRating(pack, under: profile.maxContentRating)
        }
        if let profile, !profile.canMakePurchases {
            // Ask to buy: a locked premium pack with a price becomes a pending request holding the price.
            guard let pack = try await packs.pack(tx, id: packID), pack.isActive else { throw EntitlementError.packNotFound }
            if pack.tokenPrice > 0, packs.isLocked(pack, plan: plan, bought: try await packs.unlockedIDs(tx, userID: userID)) {
                let (request, created) = try await requestPurchase(
                    tx, userID: userID, pack: pack, profile: profile, now: now, attribution: access.map { Attribution($0, period: period) })
                return UnlockResult(
                    packID: packID, spent: nil, purchaseRequest: request, requestCreated: created,
                    notice: .init(profileName: profile.name, packName: pack.name))
            }
            // Nothing to pay for (free, in the plan, owned already, or priced at 0): answered as for anyone below.
        }
        let spent = try await packs.unlock(
            tx, ledger: ledger, userID: userID, packID: packID, plan: plan, canMakePurchases: true,
            attribution: access.map { Attribution($0, period: period) })
        try await cancelPendingRequests(tx, userID: userID, packID: packID, except: nil, now: now)
        return UnlockResult(packID: packID, spent: spent)
    }

    // MARK: - Operators

    /// Every pack, inactive ones too.
    public func catalog(logger: Logger) async throws -> [StickerPack] {
        try await database.withConnection(logger: logger) { try await packs.all($0, activeOnly: false) }
    }

    /// Creates a pack (`create`; an existing id is `packExists`) or replaces one (an unknown id is `packNotFound`), audited.
    public func save(_ pack: StickerPack, create: Bool, actor: String, ip: String?, logger: Logger) async throws {
        try await database.transaction(logger: logger) { tx in
            guard try await packs.save(tx, pack, create: create) else { throw EntitlementError.packExists(pack.id) }
            try await audit.record(
                tx, at: clock.now(), actor: actor, action: create ? "admin_pack_created" : "admin_pack_updated", subject: nil, ip: ip, detail: pack.id
            )
        }
    }

    /// Deactivates a pack (unlocks are kept), audited; an unknown id is `packNotFound`.
    public func deactivate(id: String, actor: String, ip: String?, logger: Logger) async throws {
        try await database.transaction(logger: logger) { tx in
            guard try await packs.deactivate(tx, id: id) else { throw EntitlementError.packNotFound }
            try await audit.record(tx, at: clock.now(), actor: actor, action: "admin_pack_deactivated", subject: nil, ip: ip, detail: id)
        }
    }

    /// Sets a pack's icon to an uploaded file's URL, audited; the icon it replaces and `unusedKeys` (files stored for it
    /// that it does not show) are queued for removal.
    public func setIcon(packID: String, url: String, unusedKeys: [String], actor: String, ip: String?, logger: Logger) async throws -> StickerPack {
        try await database.transaction(logger: logger) { tx in
            guard let pack = try await packs.setIcon(tx, id: packID, url: url, unusedKeys: unusedKeys) else { throw EntitlementError.packNotFound }
            try await audit.record(tx, at: clock.now(), actor: actor, action: "admin_pack_icon", subject: nil, ip: ip, detail: packID)
            return pack
        }
    }
}

extension StickerService {
    /// The pack a ledger operation paid for, or nil (a reversal reports that the unlock stays).
    public func packUnlocked(byOperation operationID: String, logger: Logger) async throws -> String? {
        try await database.withConnection(logger: logger) { try await packs.packUnlocked(byOperation: operationID, $0) }
    }
}
