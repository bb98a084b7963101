import Clock
import Events
import Foundation
import Ledger
import Logging
import Storage

/// A profile's request to buy a premium pack, or to take a priced action a service reserved for it (`askToBuy`), as the
/// owner and the child see it.
public struct PurchaseRequest: Codable, Sendable, Equatable {
    public let id: String
    public let userId: String
    public let profileId: String
    /// The pack asked for; nil for an action.
    public let packId: String?
    /// The priced action a service asked for (its id, or `reserve` for a plain amount); nil for a pack.
    public let action: String?
    /// What history says of the action, e.g. "Coloring page, ultra ×2"; nil for a pack.
    public let description: String?
    public let tokens: Int64
    /// `pending`, `approved`, `declined`, `cancelled` (the pack became the account's another way) or `expired` (a
    /// pending request past `expiresAt`).
    public let status: String
    public let createdAt: Date
    public let expiresAt: Date
    public let resolvedAt: Date?

    init(row: SQLRow, now: Date) throws {
        id = try row.string("id")
        userId = try row.string("user_id")
        profileId = try row.string("profile_id")
        packId = row.optionalString("pack_id")
        action = row.optionalString("action")
        description = row.optionalString("description")
        tokens = try row.int("tokens")
        expiresAt = try row.date("expires_at_ms")
        let stored = try row.string("status")
        status = stored == "pending" && expiresAt <= now ? "expired" : stored
        createdAt = try row.date("created_at_ms")
        resolvedAt = row.optionalDate("resolved_at_ms")
    }
}

/// Tells the account's owner about a new purchase request (after it committed; best effort). `item` names what is
/// asked for ("the sticker pack Dinos", "Coloring page ×2").
public protocol PurchaseRequestNotifier: Sendable {
    func purchaseRequested(_ request: PurchaseRequest, profileName: String, item: String, logger: Logger) async
}

/// Ask to buy, in one place. A profile without `canMakePurchases` that unlocks a premium pack gets a pending request
/// instead of a refusal: the price is held (guaranteed) for ``purchaseRequestTTLSeconds``, on the profile's allowance; asking again merges into the
/// pending request (one per profile and pack, by a unique index); the owner approves (the hold is captured and the
/// pack unlocked, exactly once however many taps: the request row is locked and its status checked) or declines (the
/// hold is voided); past its expiry the request is `expired` and the ledger releases the hold like any other.
extension StickerService {
    public static let purchaseRequestTTLSeconds = 48 * 3600
    /// After the owner approves an action, its hold stays the service's for at least this long (an hour to do the work).
    public static let approvedHoldSeconds = 3600

    /// The child's ask, in the unlock's transaction: (the request, whether it is new).
    func requestPurchase(
        _ tx: any SQLExecutor, userID: String, pack: StickerPack, profile: ProfilePermissions, now: Date, attribution: Attribution?
    ) async throws -> (PurchaseRequest, created: Bool) {
        try await tx.query(
            "UPDATE purchase_requests SET status = 'expired', resolved_at_ms = ? WHERE profile_id = ? AND pack_id = ? AND status = 'pending' AND expires_at_ms <= ?",
            [now, profile.id, pack.id, now])
        let id = FreshID.uuid()
        let claimed = try await tx.query(
            """
            INSERT INTO purchase_requests (id, user_id, profile_id, pack_id, tokens, status, created_at_ms, expires_at_ms)
            VALUES (?, ?, ?, ?, ?, 'pending', ?, ?) ON CONFLICT (profile_id, pack_id) WHERE status = 'pending' DO NOTHING RETURNING id
            """, [id, userID, profile.id, pack.id, pack.tokenPrice, now, now.addingTimeInterval(Double(Self.purchaseRequestTTLSeconds))])
        guard !claimed.isEmpty else {
            guard
                let pending = try await tx.first(
                    "SELECT * FROM purchase_requests WHERE profile_id = ? AND pack_id = ? AND status = 'pending'", [profile.id, pack.id])
            else { throw StorageError.decoding(column: "purchase_requests") }
            return (try PurchaseRequest(row: pending, now: now), false)
        }
        let hold = try await ledger.hold(
            tx, userID: userID, amountTokens: pack.tokenPrice, ttlSeconds: Self.purchaseRequestTTLSeconds, reason: "purchase_request",
            metadata: #"{"packId":"\#(pack.id)","profileId":"\#(profile.id)","purchaseRequestId":"\#(id)"}"#,
            attribution: attribution, ttlSecondsMax: Self.purchaseRequestTTLSeconds, awaitingApproval: true)
        // Under the user's account locks now (taken by the hold): an approval or a purchase of this pack that committed
        // while this ask waited is seen here, and the ask is answered as for an owned pack (nothing held, no request).
        if try await packs.unlockedIDs(tx, userID: userID).contains(pack.id) {
            throw EntitlementError.alreadyUnlocked("This pack is unlocked already.")
        }
        try await tx.query("UPDATE purchase_requests SET hold_id = ? WHERE id = ?", [hold.id, id])
        let request = try await load(tx, id: id, userID: userID, now: now)
        try await packs.events.emit(
            tx,
            DomainEvent(
                type: "purchase_request.created", userID: userID,
                data: [
                    "userId": .string(userID), "purchaseRequestId": .string(id), "profileId": .string(profile.id), "packId": .string(pack.id),
                    "tokens": .int(pack.tokenPrice), "expiresAt": .string(ISOTime.string(request.expiresAt)),
                ]),
            at: now)
        return (request, true)
    }

    /// The account's requests, newest first (at most 100); with `profileID`, that profile's only.
    public func purchaseRequests(userID: String, profileID: String?, logger: Logger) async throws -> [PurchaseRequest] {
        try await database.withConnection(logger: logger) { tx in
            let now = clock.now()
            let order = " ORDER BY created_at_ms DESC, id DESC LIMIT 100"
            let rows =
                if let profileID {
                    try await tx.query("SELECT * FROM purchase_requests WHERE user_id = ? AND profile_id = ?" + order, [userID, profileID])
                } else {
                    try await tx.query("SELECT * FROM purchase_requests WHERE user_id = ?" + order, [userID])
                }
            return try rows.map { try PurchaseRequest(row: $0, now: now) }
        }
    }

    /// The owner approves: for a pack, the hold is captured and the pack unlocked, once; for an action, the hold stays for
    /// the service, which learns of the approval from `purchase_request.resolved` (with the hold's id) and captures or
    /// voids it as for any reservation. A request approved before answers as it is.
    public func approvePurchase(
        userID: String, requestID: String, authorise: @escaping Authorisation = { _ in }, logger: Logger
    ) async throws
        -> PurchaseRequest
    {
        try await resolve(userID: userID, requestID: requestID, as: "approved", authorise: authorise, logger: logger) { tx, request, holdID, now in
            guard let packID = request.packId else {
                if let holdID { try await ledger.approveHold(tx, holdID: holdID, minimumSeconds: Self.approvedHoldSeconds) }
                return
            }
            // Free now or included in the plan since: nothing to buy. Otherwise the unlock row decides (bought meanwhile:
            // nothing to charge); either way a hold not charged goes back.
            let plan = try await subscriptions.currentPlan(userID: userID, now: now, tx)
            let stillLocked = try await packs.pack(tx, id: packID).map { packs.isLocked($0, plan: plan, bought: []) } ?? true
            let bought =
                stillLocked
                ? try await tx.query(
                    "INSERT INTO pack_unlocks (user_id, pack_id, tokens_spent, created_at_ms) VALUES (?, ?, ?, ?) ON CONFLICT (user_id, pack_id) DO NOTHING RETURNING pack_id",
                    [userID, packID, request.tokens, now]) : []
            if let holdID {
                if bought.isEmpty {
                    _ = try await ledger.void(tx, holdID: holdID, byApprover: true)
                } else {
                    _ = try await ledger.capture(tx, holdID: holdID, byApprover: true)
                }
            }
            if !bought.isEmpty {
                try await tx.query("UPDATE pack_unlocks SET operation_id = ? WHERE user_id = ? AND pack_id = ?", [holdID, userID, packID])
                try await packs.emitUnlocked(tx, userID: userID, packID: packID, tokens: request.tokens, operationID: holdID, now: now)
            }
            try await cancelPendingRequests(tx, userID: userID, packID: packID, except: request.id, now: now)
        }
    }

    /// The owner declines: the hold is voided; a request declined before answers as it is.
    public func declinePurchase(
        userID: String, requestID: String, authorise: @escaping Authorisation = { _ in }, logger: Logger
    ) async throws
        -> PurchaseRequest
    {
        try await resolve(userID: userID, requestID: requestID, as: "declined", authorise: authorise, logger: logger) { tx, _, holdID, _ in
            // A hold the ledger released meanwhile (expired with the request's last moment) has nothing left to give back.
            if let holdID { do { _ = try await ledger.void(tx, holdID: holdID, byApprover: true) } catch LedgerError.holdResolved {} }
        }
    }

    /// What a caller checks first in the transaction that resolves a request: the owner's session still holds (Auth's
    /// `AuthService.stillLive`), so an answer sent just before the owner's sessions were revoked changes nothing.
    public typealias Authorisation = @Sendable (any SQLExecutor) async throws -> Void

    /// Resolves a pending request as `status` once, in one transaction with `work` (given the request, its hold and the
    /// time), after `authorise`: the user's ledger accounts and then the row are locked first, so parallel taps run one
    /// after another; one already resolved as
    /// `status` answers as it is, one resolved otherwise (or expired) is `purchaseRequestResolved`.
    func resolve(
        userID: String, requestID: String, as status: String, authorise: @escaping Authorisation, logger: Logger,
        _ work: @escaping @Sendable (any SQLExecutor, PurchaseRequest, String?, Date) async throws -> Void
    ) async throws -> PurchaseRequest {
        try await database.transaction(lane: Ledger.lane(userID: userID), logger: logger) { tx in
            try await authorise(tx)
            let now = clock.now()
            // The ledger's order: the user's accounts, then the request (an unlock cancels requests under the same locks).
            try await ledger.lockAccountsFirst(tx, userID: userID)
            let request = try await locked(tx, id: requestID, userID: userID, now: now)
            if request.status == status { return request }
            guard request.status == "pending" else { throw EntitlementError.purchaseRequestResolved(request.status) }
            let holdID = try await tx.first("SELECT hold_id FROM purchase_requests WHERE id = ?", [requestID])?.optionalString("hold_id")
            try await work(tx, request, holdID, now)
            try await tx.query("UPDATE purchase_requests SET status = ?, resolved_at_ms = ? WHERE id = ?", [status, now, requestID])
            let resolved = try await load(tx, id: requestID, userID: userID, now: now)
            try await packs.events.emit(tx, Self.resolvedEvent(resolved, holdID: holdID), at: now)
            return resolved
        }
    }

    /// `purchase_request.resolved`: how the owner answered, and for an approved action the hold the service may now capture.
    static func resolvedEvent(_ request: PurchaseRequest, holdID: String?) -> DomainEvent {
        DomainEvent(
            type: "purchase_request.resolved", userID: request.userId,
            data: [
                "userId": .string(request.userId), "purchaseRequestId": .string(request.id), "profileId": .string(request.profileId),
                "status": .string(request.status), "packId": .optional(request.packId), "action": .optional(request.action),
                "tokens": .int(request.tokens), "holdId": .optional(request.action != nil && request.status == "approved" ? holdID : nil),
            ])
    }

    /// Once a pack is the account's, every other pending request for it is `cancelled` and its hold voided (a hold the
    /// ledger already released is left as it is). Runs after the unlock's own ledger work, so under the user's account
    /// locks: an ask committed meanwhile is seen here, and a later ask sees the unlock (``requestPurchase``).
    func cancelPendingRequests(_ tx: any SQLExecutor, userID: String, packID: String, except: String?, now: Date) async throws {
        try await Self.cancel(tx, ledger: ledger, userID: userID, " AND pack_id = ?", [packID], except: except, now: now)
    }

    /// A deleted profile's pending requests are `cancelled` and their tokens released (in the deletion's transaction).
    public static func cancelRequests(_ tx: any SQLExecutor, ledger: Ledger, userID: String, profileID: String, now: Date) async throws {
        try await cancel(tx, ledger: ledger, userID: userID, " AND profile_id = ?", [profileID], except: nil, now: now)
    }

    /// An erased account's pending requests are `cancelled` (the ledger forfeits their holds in the same transaction).
    public static func cancelRequests(_ tx: any SQLExecutor, ledger: Ledger, userID: String, now: Date) async throws {
        try await cancel(tx, ledger: ledger, userID: userID, "", [], except: nil, now: now)
    }

    /// The user's accounts are locked first, then the requests (the order every approval takes), so a request approved
    /// while this waited is seen as approved and left alone, its hold with it.
    static func cancel(
        _ tx: any SQLExecutor, ledger: Ledger, userID: String, _ condition: String, _ binds: [String], except: String?, now: Date
    ) async throws {
        try await ledger.lockAccountsFirst(tx, userID: userID)
        let pending = try await tx.query(
            "SELECT id, hold_id FROM purchase_requests WHERE user_id = ?\(condition) AND status = 'pending' ORDER BY id" + tx.dialect.forUpdate,
            [userID] + binds)
        for row in pending where try row.string("id") != except {
            if let holdID = row.optionalString("hold_id") {
                do { _ = try await ledger.void(tx, holdID: holdID, byApprover: true) } catch LedgerError.holdResolved {}
            }
            try await tx.query(
                "UPDATE purchase_requests SET status = 'cancelled', resolved_at_ms = ? WHERE id = ?", [now, try row.string("id")])
        }
    }

    /// The request, its row locked (so parallel approvals and declines run one after another); another account's is
    /// `purchaseRequestNotFound`.
    func locked(_ tx: any SQLExecutor, id: String, userID: String, now: Date) async throws -> PurchaseRequest {
        guard let row = try await tx.first("SELECT * FROM purchase_requests WHERE id = ? AND user_id = ?" + tx.dialect.forUpdate, [id, userID]) else {
            throw EntitlementError.purchaseRequestNotFound
        }
        return try PurchaseRequest(row: row, now: now)
    }

    func load(_ tx: any SQLExecutor, id: String, userID: String, now: Date) async throws -> PurchaseRequest {
        guard let row = try await tx.first("SELECT * FROM purchase_requests WHERE id = ? AND user_id = ?", [id, userID]) else {
            throw EntitlementError.purchaseRequestNotFound
        }
        return try PurchaseRequest(row: row, now: now)
    }
}

extension EntitlementService {
    /// A service's reservation with `askToBuy` for a profile that cannot make purchases: instead of a refusal, a pending
    /// request for the owner holds the price for ``StickerService/purchaseRequestTTLSeconds`` (the caller's `ttlSeconds`
    /// does not apply), counted on the profile's allowance like any hold. Each ask is its own request (no merge: two
    /// generations are two things); a retry with the same `Idempotency-Key` replays it. The owner approves (the hold stays
    /// for the service to capture) or declines (voided); `purchase_request.resolved` tells the service either way.
    func askToBuy(
        _ tx: any SQLExecutor, _ input: ReserveInput, profile: ProfilePermissions, quote: PricedQuote?, attribution: Attribution?,
        idempotencyKey: String
    ) async throws -> Reservation {
        let now = clock.now()
        let id = FreshID.uuid()
        let tokens = quote?.tokens ?? input.tokens ?? 0
        let (action, description) = (quote?.action ?? "reserve", quote?.description ?? (tokens == 1 ? "1 token" : "\(tokens) tokens"))
        let ttl = StickerService.purchaseRequestTTLSeconds
        try await tx.query(
            """
            INSERT INTO purchase_requests (id, user_id, profile_id, pack_id, action, description, tokens, status, created_at_ms, expires_at_ms)
            VALUES (?, ?, ?, NULL, ?, ?, ?, 'pending', ?, ?)
            """, [id, input.userID, profile.id, action, description, tokens, now, now.addingTimeInterval(Double(ttl))])
        let (hold, balances) = try await ledger.holdWithBalances(
            tx, userID: input.userID, amountTokens: tokens, ttlSeconds: ttl, reason: action,
            metadata: try Self.holdMetadata(quote, profileID: profile.id, caller: input.metadata, purchaseRequestID: id),
            idempotencyKey: idempotencyKey, attribution: attribution, ttlSecondsMax: ttl, awaitingApproval: true)
        try await tx.query("UPDATE purchase_requests SET hold_id = ? WHERE id = ?", [hold.id, id])
        guard let row = try await tx.first("SELECT * FROM purchase_requests WHERE id = ?", [id]) else {
            throw StorageError.decoding(column: "purchase_requests")
        }
        let request = try PurchaseRequest(row: row, now: now)
        try await packs.events.emit(
            tx,
            DomainEvent(
                type: "purchase_request.created", userID: input.userID,
                data: [
                    "userId": .string(input.userID), "purchaseRequestId": .string(id), "profileId": .string(profile.id), "packId": .null,
                    "action": .string(action), "description": .string(description), "tokens": .int(tokens),
                    "expiresAt": .string(ISOTime.string(request.expiresAt)),
                ]),
            at: now)
        var reservation = Reservation(hold: hold, quote: quote, balances: balances, purchaseRequest: request)
        reservation.askedBy = profile.name
        return reservation
    }
}
