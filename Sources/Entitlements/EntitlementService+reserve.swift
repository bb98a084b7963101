import Clock
import Foundation
import Ledger
import Logging
import Storage

/// What a service asks `POST /api/entitlements/reserve` for: a priced action or a plain amount (`tokens`), for a user and
/// optionally one of the account's profiles, optionally gated on a sticker pack.
public struct ReserveInput: Sendable {
    public let userID: String
    public let profileID: String?
    public let action: PricedCall?
    public let tokens: Int64?
    public let packID: String?
    public let ttlSeconds: Int
    /// The caller's metadata as canonical JSON text, kept on the hold under `metadata`.
    public let metadata: String?
    /// For a profile that cannot make purchases: ask the owner instead of refusing (a pending purchase request holds
    /// the price for 48 hours).
    public let askToBuy: Bool

    public init(
        userID: String, profileID: String?, action: PricedCall?, tokens: Int64?, packID: String?, ttlSeconds: Int, metadata: String?,
        askToBuy: Bool = false
    ) {
        (self.userID, self.profileID, self.action, self.tokens) = (userID, profileID, action, tokens)
        (self.packID, self.ttlSeconds, self.metadata, self.askToBuy) = (packID, ttlSeconds, metadata, askToBuy)
    }
}

/// A reservation: the hold it made, the priced action it is for (nil for a plain amount) and the balances after it; for
/// an ask to buy, the pending request whose hold it is (the service learns of the answer from `purchase_request.resolved`).
public struct Reservation: Codable, Sendable, Equatable {
    public let hold: HoldState
    public let quote: PricedQuote?
    public let balances: BucketBalances
    public var purchaseRequest: PurchaseRequest? = nil
    /// For the owner's mail: the asking profile's name.
    var askedBy: String? = nil
}

/// What the hold of a priced action remembers (its metadata), so history says what the tokens were for.
struct ReservedFor: Encodable {
    let action: String
    let quantity: Int
    let attributes: [String: String]
    let description: String
    let profileId: String?
    let purchaseRequestId: String?
}

extension EntitlementService {
    /// Check and reserve in one transaction, at most once per (caller, `Idempotency-Key`): the user's plan, the profile
    /// (one of the account's, usable on the plan, with the permission the action needs), the action's price and gates,
    /// the pack, then the hold. A refusal (``EntitlementError/refused(_:detail:)``) writes nothing and is not remembered:
    /// the same key may succeed once the user upgrades. Too few tokens is the ledger's remembered `insufficient_tokens`.
    public func reserve(_ request: IdempotentRequest, _ input: ReserveInput, logger: Logger) async throws -> IdempotentResult<Reservation> {
        let result = try await IdempotencyStore(clock: clock).run(
            database, caller: request.caller, key: request.key, request: request.fields, lane: Ledger.lane(userID: input.userID), logger: logger
        ) { tx in try await reserve(tx, input, idempotencyKey: request.key) }
        if !result.replayed, case .succeeded(let reservation) = result.outcome, let asked = reservation.purchaseRequest {
            await notifier?.purchaseRequested(asked, profileName: reservation.askedBy ?? "", item: asked.description ?? "", logger: logger)
        }
        return result
    }

    func reserve(_ tx: any SQLExecutor, _ input: ReserveInput, idempotencyKey: String) async throws -> Reservation {
        guard (input.action == nil) != (input.tokens == nil) else {
            throw EntitlementError.invalid(["give either action (with quantity and attributes) or tokens"])
        }
        // Checked for every reservation, an ask to buy too (which holds for 48 hours instead), so a bad value is always 400.
        guard (1...LedgerLimits.holdTTLSecondsMax).contains(input.ttlSeconds) else {
            throw LedgerError.invalid("ttlSeconds must be from 1 to \(LedgerLimits.holdTTLSecondsMax).")
        }
        let now = clock.now()
        // For a profile, the ledger's locks before the profile is read, as a sticker unlock takes them: a profile deleted
        // in between left an ask to buy from it that its deletion (which cancels asks under the same locks) did not see,
        // holding the account's tokens for 48 hours. A reserve for the account itself has nothing a deletion cancels.
        if input.profileID != nil { try await ledger.lockAccountsFirst(tx, userID: input.userID) }
        let (plan, period) = try await subscriptions.planAndPeriod(userID: input.userID, now: now, tx)
        let access = try await profile(tx, input, plan: plan)
        let permissions = access?.permissions
        var quote: PricedQuote?
        if let action = input.action {
            switch try RateCard.quote(
                subscriptions.catalog, actionID: action.id, quantity: action.quantity, attributes: action.attributes, plan: plan,
                permissions: permissions)
            {
            case .success(let priced): quote = priced
            case .failure(let refusal):
                try await requireUser(tx, input.userID)
                throw EntitlementError.refused(refusal, detail: Self.detail(refusal, action: action.id, plan: plan))
            }
        }
        if let packID = input.packID {
            guard let pack = try await packs.pack(tx, id: packID), pack.isActive else { throw EntitlementError.packNotFound }
            try StickerPackStore.requireRating(pack, under: permissions?.maxContentRating)
            if packs.isLocked(pack, plan: plan, bought: try await packs.unlockedIDs(tx, userID: input.userID)) {
                try await requireUser(tx, input.userID)
                throw EntitlementError.refused(.packLocked, detail: "The user has not unlocked the premium pack '\(packID)'.")
            }
        }
        let attribution = access.map { Attribution($0, period: period) }
        do {
            if input.askToBuy, let profile = permissions, !profile.canMakePurchases {
                return try await askToBuy(tx, input, profile: profile, quote: quote, attribution: attribution, idempotencyKey: idempotencyKey)
            }
            let (hold, balances) = try await ledger.holdWithBalances(
                tx, userID: input.userID, amountTokens: quote?.tokens ?? input.tokens ?? 0, ttlSeconds: input.ttlSeconds,
                reason: quote?.action ?? "reserve", metadata: try Self.holdMetadata(quote, profileID: input.profileID, caller: input.metadata),
                idempotencyKey: idempotencyKey, attribution: attribution)
            return Reservation(hold: hold, quote: quote, balances: balances)
        } catch LedgerError.insufficientTokens(availableTokens: 0) {
            // An unknown user has no tokens: only then is it worth asking whether the user exists (as the ledger does).
            try await requireUser(tx, input.userID)
            throw LedgerError.insufficientTokens(availableTokens: 0)
        }
    }

    /// `userNotFound` unless `userID` is a live user. Asked only on a refusal: a reservation that holds tokens had a user.
    func requireUser(_ tx: any SQLExecutor, _ userID: String) async throws {
        guard try await accounts.isActiveUser(userID, tx, lock: false) else { throw LedgerError.userNotFound(userID) }
    }

    /// The named profile (nil when none is named): one of the account's profiles, within the plan's limit.
    func profile(_ tx: any SQLExecutor, _ input: ReserveInput, plan: SubscriptionPlan) async throws -> ProfileAccess? {
        guard let profileID = input.profileID else { return nil }
        guard let access = try await accounts.profile(userID: input.userID, profileID: profileID, tx) else {
            throw EntitlementError.profileNotFound
        }
        guard access.rank < plan.maxFamilyProfiles else {
            throw EntitlementError.refused(
                .profileRestricted, detail: "This profile is locked: the plan '\(plan.id)' allows \(plan.maxFamilyProfiles) profile(s).")
        }
        return access
    }

    static func detail(_ refusal: Refusal, action: String, plan: SubscriptionPlan) -> String {
        switch refusal {
        case .subscriptionRequired: "'\(action)' with these attributes needs a subscription (see GET /api/pricing)."
        case .featureNotInPlan: "'\(action)' with these attributes is not in the plan '\(plan.id)' (see GET /api/pricing)."
        case .profileRestricted: "This profile may not use '\(action)'."
        case .contentRestricted: "'\(action)' is rated above this profile's maximum content rating."
        case .packLocked, .purchaseNotAllowed: "'\(action)' is not allowed."
        }
    }

    /// The hold's metadata: what it is for, and the caller's own metadata (already canonical JSON) under `metadata`.
    static func holdMetadata(_ quote: PricedQuote?, profileID: String?, caller: String?, purchaseRequestID: String? = nil) throws -> String? {
        guard let quote else {
            guard let profileID else { return caller }
            var fields = ["profileId": profileID]
            fields["purchaseRequestId"] = purchaseRequestID
            return try Self.json(fields, caller: caller)
        }
        let reserved = ReservedFor(
            action: quote.action, quantity: quote.quantity, attributes: quote.attributes, description: quote.description, profileId: profileID,
            purchaseRequestId: purchaseRequestID)
        return try json(reserved, caller: caller)
    }

    static func json(_ value: some Encodable, caller: String?) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let text = String(decoding: try encoder.encode(value), as: UTF8.self)
        guard let caller else { return text }
        return String(text.dropLast()) + #","metadata":"# + caller + "}"
    }
}
