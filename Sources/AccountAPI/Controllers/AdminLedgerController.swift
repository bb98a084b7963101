import Auth
import Entitlements
import Foundation
import Hummingbird
import Ledger

/// Operators correct balances (debits, reversals), see pending holds, and see what the app sees (a read-only snapshot;
/// there is no impersonation). Every change is audited and emits its event.
struct AdminLedgerController: Sendable {
    let auth: AuthService
    let profiles: ProfileService
    let entitlements: EntitlementService
    let stickers: StickerService
    let ledger: LedgerService
    let authenticator: Authenticator

    struct DebitRequest: Codable { let amount: Int64; let bucket: Bucket?; let reason: String }
    struct ReverseRequest: Decodable { let reason: String }

    struct ReversalJSON: ExplicitNulls, Sendable {
        let operationId: String; let reversedOperationId: String; let reversedReason: String; let userId: String; let amount: Int64
        let balances: BalancesJSON; let unlock: UnlockJSON?
        struct UnlockJSON: Encodable, Sendable { let packId: String; let kept: Bool; let note: String }
    }
    struct HoldsJSON: Encodable, Sendable { let holds: [HoldJSON] }
    struct SnapshotJSON: Encodable, Sendable {
        let user: AdminUserJSON; let entitlements: EntitlementSnapshot; let profiles: [ProfileJSON]; let balance: TokenBalanceJSON
        let subscription: SubscriptionJSON
    }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.post("/api/admin/users/:userId/debits", use: debit)
        router.post("/api/admin/ledger/transfers/:id/reverse", use: reverse)
        router.get("/api/admin/users/:userId/holds", use: holds)
        router.get("/api/admin/users/:userId/snapshot", use: snapshot)
    }

    /// Idempotent (`Idempotency-Key` required), never below zero, audited.
    @Sendable func debit(_ request: Request, context: AppRequestContext) async throws -> Response {
        let actor = try await authenticator.requireOperator(request, context)
        let userID = try await authenticator.existingUser(context)
        var request = request
        let body = try await request.decodeJSON(DebitRequest.self, context: context)
        let identity = IdempotentRequest(
            caller: actor, key: try IdempotentResponse.key(request),
            fields: canonicalFields(body, extra: ["endpoint": "admin-debits", "userId": userID]))
        let answer = try await ledger.debit(
            identity, userID: userID, amountTokens: body.amount, bucket: body.bucket, note: body.reason, actor: actor, ip: context.clientIP,
            logger: context.logger)
        return try IdempotentResponse.response(answer, .created, LedgerResultJSON.init)
    }

    /// Once per operation (a second call is 409 `already_reversed`); reversing a pack unlock's spend keeps the unlock.
    @Sendable func reverse(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<ReversalJSON> {
        let actor = try await authenticator.requireOperator(request, context)
        var request = request
        let body = try await request.decodeJSON(ReverseRequest.self, context: context)
        let reversal = try await ledger.reverse(
            transferID: try context.pathParameter("id"), note: body.reason, actor: actor, ip: context.clientIP, logger: context.logger)
        let pack = try await stickers.packUnlocked(byOperation: reversal.reversedOperationID, logger: context.logger)
        return JSONResponse(
            ReversalJSON(
                operationId: reversal.operationID, reversedOperationId: reversal.reversedOperationID, reversedReason: reversal.reversedReason,
                userId: reversal.userID, amount: reversal.amountTokens, balances: BalancesJSON(reversal.balances),
                unlock: pack.map {
                    .init(packId: $0, kept: true, note: "The tokens are returned and the pack stays unlocked (an unlock is never taken back).")
                }), status: .created)
    }

    @Sendable func holds(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<HoldsJSON> {
        _ = try await authenticator.requireOperator(request, context)
        let userID = try await authenticator.existingUser(context)
        return JSONResponse(HoldsJSON(holds: try await ledger.pendingHolds(userID: userID, logger: context.logger).map(HoldJSON.init)))
    }

    /// What the app shows this user (owner profile), read-only.
    @Sendable func snapshot(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<SnapshotJSON> {
        _ = try await authenticator.requireOperator(request, context)
        let userID = try context.pathParameter("userId")
        let user = try await auth.findUser(id: userID, logger: context.logger)
        if user.deleted { throw Problem.notFound("User \(userID) was erased; nothing to show.") }
        return JSONResponse(
            SnapshotJSON(
                user: AdminUserJSON(user),
                entitlements: try await entitlements.snapshot(userID: userID, withProfile: true, selectedProfileID: nil, logger: context.logger),
                profiles: try await profiles.available(userID: userID, logger: context.logger).map(ProfileJSON.init),
                balance: TokenBalanceJSON(try await entitlements.tokenBalance(userID: userID, logger: context.logger)),
                subscription: SubscriptionJSON(try await entitlements.subscriptionView(userID: userID, logger: context.logger))))
    }
}
