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
            by: .service(caller, ip: context.clientIP), logger: context.logger)
        return try IdempotentResponse.response(answer, .created, LedgerResultJSON.init)
    }

    /// The ledger chooses the engine's path (``LedgerService/spend(_:key:fields:userID:amountTokens:reason:metadata:logger:)``).
    /// The caller's 401 / 403 comes before any input error, as on every route here. Only a bearer that looks like an API
    /// key is checked in the spend's own statement, so its body is read first, and bounded (``spendBodyBytesMax``);
    /// anything else is authenticated before the body is read.
    @Sendable func spend(_ request: Request, context: AppRequestContext) async throws -> Response {
        let headers = request
        let presented = Authenticator.bearerToken(request).flatMap { $0.hasPrefix(APIKeyService.prefix) ? $0 : nil }
        let caller = LedgerCaller(presentedKey: presented) { try await self.caller(headers, context) }
        if presented == nil { _ = try await caller.authenticate() }
        var request = request
        let body: SpendRequest
        let key: String
        do {
            body = try await request.decodeJSON(SpendRequest.self, context: context, limitBytes: Self.spendBodyBytesMax)
            key = try IdempotentResponse.key(request)
        } catch {
            _ = try await caller.authenticate()
            throw error
        }
        let answer = try await ledger.spend(
            caller, key: key, fields: canonicalFields(body, extra: ["endpoint": "spend"]), userID: body.userId, amountTokens: body.amount,
            reason: body.reason, metadata: body.metadata?.canonicalText, logger: context.logger)
        return try IdempotentResponse.response(answer, .ok, LedgerResultJSON.init)
    }

    /// A spend's body: its metadata is at most 4 KiB as canonical JSON; 64 KiB leaves room for any spacing.
    static let spendBodyBytesMax = 64 << 10

    @Sendable func hold(_ request: Request, context: AppRequestContext) async throws -> Response {
        let caller = try await caller(request, context)
        var request = request
        let body = try await request.decodeJSON(HoldRequest.self, context: context)
        let answer = try await ledger.hold(
            try idempotent(request, caller, body, endpoint: "holds"), userID: body.userId, amountTokens: body.amount,
            ttlSeconds: body.ttlSeconds ?? LedgerLimits.holdTTLSecondsDefault, reason: body.reason, metadata: body.metadata?.canonicalText,
            logger: context.logger)
        return try IdempotentResponse.response(answer, .created, HoldJSON.init)
    }

    @Sendable func capture(_ request: Request, context: AppRequestContext) async throws -> Response {
        let caller = try await caller(request, context)
        let id = try context.pathParameter("id")
        var request = request
        let body = try await request.decodeJSON(CaptureRequest.self, context: context, emptyMeans: "{}")
        let identity = IdempotentRequest(
            caller: caller, key: try IdempotentResponse.key(request), fields: canonicalFields(body, extra: ["endpoint": "capture", "holdId": id]))
        let answer = try await ledger.capture(
            identity, holdID: id, amountTokens: body.amount, logger: context.logger)
        return try IdempotentResponse.response(answer, .ok, HoldJSON.init)
    }

    @Sendable func void(_ request: Request, context: AppRequestContext) async throws -> Response {
        let caller = try await caller(request, context)
        let id = try context.pathParameter("id")
        let identity = IdempotentRequest(caller: caller, key: try IdempotentResponse.key(request), fields: ["endpoint": "void", "holdId": id])
        return try IdempotentResponse.response(try await ledger.void(identity, holdID: id, logger: context.logger), .ok, HoldJSON.init)
    }

    func caller(_ request: Request, _ context: AppRequestContext) async throws -> String {
        LedgerCallerKeysOfAuth.name(keyID: try await authenticator.requireScope(LedgerCallerKeysOfAuth.scope, request, context).id)
    }

    func idempotent<Body: Encodable>(_ request: Request, _ caller: String, _ body: Body, endpoint: String) throws -> IdempotentRequest {
        IdempotentRequest(caller: caller, key: try IdempotentResponse.key(request), fields: canonicalFields(body, extra: ["endpoint": endpoint]))
    }
}
