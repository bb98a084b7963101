import Auth
import Foundation
import HTTPTypes
import Hummingbird
import Ledger
import Storage

/// Service endpoints that move tokens (API key scope `ledger:write`, `Idempotency-Key` required).
struct LedgerController: Sendable {
    let ledger: LedgerService
    let authenticator: Authenticator
    /// Spends through PostgreSQL's `ledger_spend_once` when possible (`LEDGER_ONE_STATEMENT_SPEND=false` turns it off).
    var oneStatementSpends = true

    struct SpendRequest: Codable { let userId: String; let amount: Int64; let reason: String; let metadata: JSONValue? }
    struct HoldRequest: Codable { let userId: String; let amount: Int64; let ttlSeconds: Int?; let reason: String; let metadata: JSONValue? }
    struct CaptureRequest: Codable { let amount: Int64? }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.post("/api/ledger/grants", use: grant)
        router.post("/api/ledger/spend", use: spend)
        router.post("/api/ledger/holds", use: hold)
        router.post("/api/ledger/holds/:id/capture", use: capture)
        router.post("/api/ledger/holds/:id/void", use: void)
    }

    @Sendable func grant(_ request: Request, context: AppRequestContext) async throws -> Response {
        let caller = try await caller(request, context)
        var request = request
        let body = try await request.decodeJSON(LedgerGrantRequest.self, context: context)
        let answer = try await ledger.grant(
            try idempotent(request, caller, body, endpoint: "grants"), userID: body.userId, amountTokens: body.amount, bucket: body.bucket,
            reason: body.reason ?? "grant", expiresAt: try ISODate.parse(body.expiresAt, field: "expiresAt"), metadata: body.metadata?.canonicalText,
            by: .service(caller, ip: context.clientIP), format: IdempotentResponse.ledgerResult, logger: context.logger)
        return IdempotentResponse.response(answer)
    }

    @Sendable func spend(_ request: Request, context: AppRequestContext) async throws -> Response {
        var request = request
        if let response = try await oneStatementSpend(&request, context) { return response }
        let caller = try await caller(request, context)
        let body = try await request.decodeJSON(SpendRequest.self, context: context)
        let answer = try await ledger.spend(
            try idempotent(request, caller, body, endpoint: "spend"), userID: body.userId, amountTokens: body.amount, reason: body.reason,
            metadata: body.metadata?.canonicalText, format: IdempotentResponse.ledgerResult, logger: context.logger)
        return IdempotentResponse.response(answer)
    }

    @Sendable func hold(_ request: Request, context: AppRequestContext) async throws -> Response {
        let caller = try await caller(request, context)
        var request = request
        let body = try await request.decodeJSON(HoldRequest.self, context: context)
        let answer = try await ledger.hold(
            try idempotent(request, caller, body, endpoint: "holds"), userID: body.userId, amountTokens: body.amount,
            ttlSeconds: body.ttlSeconds ?? LedgerLimits.holdTTLSecondsDefault, reason: body.reason, metadata: body.metadata?.canonicalText,
            format: IdempotentResponse.hold, logger: context.logger)
        return IdempotentResponse.response(answer)
    }

    @Sendable func capture(_ request: Request, context: AppRequestContext) async throws -> Response {
        let caller = try await caller(request, context)
        let id = try context.pathParameter("id")
        var request = request
        let body = try await request.decodeJSON(CaptureRequest.self, context: context, emptyMeans: "{}")
        let identity = IdempotentRequest(
            caller: caller, key: try IdempotentResponse.key(request), fields: canonicalFields(body, extra: ["endpoint": "capture", "holdId": id]))
        let answer = try await ledger.capture(
            identity, holdID: id, amountTokens: body.amount, format: IdempotentResponse.hold, logger: context.logger)
        return IdempotentResponse.response(answer)
    }

    @Sendable func void(_ request: Request, context: AppRequestContext) async throws -> Response {
        let caller = try await caller(request, context)
        let id = try context.pathParameter("id")
        let identity = IdempotentRequest(caller: caller, key: try IdempotentResponse.key(request), fields: ["endpoint": "void", "holdId": id])
        return IdempotentResponse.response(try await ledger.void(identity, holdID: id, format: IdempotentResponse.hold, logger: context.logger))
    }

    /// PostgreSQL: a well-formed spend with a live `ledger:write` key is answered by one statement (the key check, the
    /// idempotency lookup, the spend and its stored response). Nil → the ordinary path answers, which it does for
    /// everything else: any input error, an unknown key (401 / 403 first, as always), and every case the statement
    /// declines without writing (too few tokens, holds or lots to settle, accounts not created yet).
    func oneStatementSpend(_ request: inout Request, _ context: AppRequestContext) async throws -> Response? {
        guard oneStatementSpends, ledger.database.engine == .postgres, let secret = Authenticator.bearerToken(request),
            let keyQuery = APIKeyService.scopedKeyQuery(secret: secret, scope: "ledger:write", callerPrefix: "key:", now: ledger.clock.now()),
            let key = try? IdempotentResponse.key(request)
        else { return nil }
        do {
            _ = try await request.rawBody(context: context)  // collected once; the ordinary path reads it again
        } catch {
            _ = try await caller(request, context)  // 401 / 403 before 413, as on the ordinary path
            throw error
        }
        guard let body = try? await request.decodeJSON(SpendRequest.self, context: context) else { return nil }
        let identity = IdempotentRequest(caller: "", key: key, fields: canonicalFields(body, extra: ["endpoint": "spend"]))
        let (answer, statement) = try await ledger.spendInOneStatement(
            caller: .query(sql: keyQuery.sql, binds: keyQuery.binds), request: identity, userID: body.userId, amountTokens: body.amount,
            reason: body.reason, metadata: body.metadata?.canonicalText, encode: { try IdempotentResponse.encode(LedgerResultJSON($0)) },
            logger: context.logger)
        if let id = statement.callerID { try await authenticator.apiKeys.touch(id: id, lastUsedAt: statement.callerSeenAt, logger: context.logger) }
        return answer.map(IdempotentResponse.response)
    }

    func caller(_ request: Request, _ context: AppRequestContext) async throws -> String {
        "key:" + (try await authenticator.requireScope("ledger:write", request, context)).id
    }

    func idempotent<Body: Encodable>(_ request: Request, _ caller: String, _ body: Body, endpoint: String) throws -> IdempotentRequest {
        IdempotentRequest(caller: caller, key: try IdempotentResponse.key(request), fields: canonicalFields(body, extra: ["endpoint": endpoint]))
    }
}
