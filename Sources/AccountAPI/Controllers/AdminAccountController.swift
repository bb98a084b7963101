import Entitlements
import Foundation
import Hummingbird
import Ledger

/// Operators manage a user's subscription (comps) and tokens, and check the books. Every change is audited.
struct AdminAccountController: Sendable {
    let subscriptions: SubscriptionService
    let entitlements: EntitlementService
    let ledger: LedgerService
    let authenticator: Authenticator

    struct CompRequest: Decodable { let planId: String; let periodEnd: String? }
    struct GrantRequest: Codable { let amount: Int64; let bucket: Bucket; let reason: String?; let expiresAt: String?; let metadata: JSONValue? }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.post("/api/admin/users/:userId/subscription", use: comp)
        router.delete("/api/admin/users/:userId/subscription", use: endSubscription)
        router.post("/api/admin/users/:userId/grants", use: grant)
        router.get("/api/admin/users/:userId/token-balance", use: balance)
        router.get("/api/admin/users/:userId/token-history", use: history)
        router.get("/api/admin/ledger/verify", use: verify)
    }

    @Sendable func comp(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<SubscriptionJSON> {
        let actor = try await authenticator.requireOperator(request, context)
        let userID = try await authenticator.liveUser(context)
        var request = request
        let body = try await request.decodeJSON(CompRequest.self, context: context)
        let view = try await subscriptions.comp(
            userID: userID, planID: body.planId, periodEnd: try ISODate.parse(body.periodEnd, field: "periodEnd"), actor: actor, ip: context.clientIP,
            logger: context.logger)
        return JSONResponse(SubscriptionJSON(view))
    }

    @Sendable func endSubscription(_ request: Request, context: AppRequestContext) async throws -> Response {
        let actor = try await authenticator.requireOperator(request, context)
        let userID = try await authenticator.existingUser(context)
        guard try await subscriptions.end(userID: userID, actor: actor, ip: context.clientIP, logger: context.logger) else {
            throw Problem.notFound("This user has no subscription.")
        }
        return Response(status: .noContent)
    }

    /// Idempotent like a service grant (`Idempotency-Key` required), audited in the same transaction.
    @Sendable func grant(_ request: Request, context: AppRequestContext) async throws -> Response {
        let actor = try await authenticator.requireOperator(request, context)
        let userID = try await authenticator.existingUser(context)
        var request = request
        let body = try await request.decodeJSON(GrantRequest.self, context: context)
        let expiresAt = try ISODate.parse(body.expiresAt, field: "expiresAt")
        let fields = LedgerGrantRequest(
            userId: userID, amount: body.amount, bucket: body.bucket, reason: body.reason ?? "admin_grant", expiresAt: body.expiresAt,
            metadata: body.metadata)
        let identity = IdempotentRequest(
            caller: actor, key: try IdempotentResponse.key(request), fields: canonicalFields(fields, extra: ["endpoint": "admin-grants"]))
        let answer = try await ledger.grant(
            identity, userID: userID, amountTokens: body.amount, bucket: body.bucket, reason: body.reason ?? "admin_grant", expiresAt: expiresAt,
            metadata: body.metadata?.canonicalText, by: .operatorActor(actor, ip: context.clientIP),
            logger: context.logger)
        return try IdempotentResponse.response(answer, .created, LedgerResultJSON.init)
    }

    @Sendable func balance(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<TokenBalanceJSON> {
        _ = try await authenticator.requireOperator(request, context)
        let userID = try await authenticator.existingUser(context)
        return JSONResponse(TokenBalanceJSON(try await entitlements.tokenBalance(userID: userID, logger: context.logger)))
    }

    @Sendable func history(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<HistoryJSON> {
        _ = try await authenticator.requireOperator(request, context)
        let userID = try await authenticator.existingUser(context)
        let (limit, cursor) = try HistoryJSON.page(request)
        return JSONResponse(HistoryJSON(try await ledger.history(userID: userID, limit: limit, cursor: cursor, logger: context.logger)))
    }

    @Sendable func verify(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<VerifyReport> {
        _ = try await authenticator.requireOperator(request, context)
        return JSONResponse(try await ledger.verify(logger: context.logger))
    }
}
