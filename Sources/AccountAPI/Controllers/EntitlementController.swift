import Auth
import Entitlements
import Foundation
import HTTPTypes
import Hummingbird
import Ledger
import Logging
import Metrics
import NIOCore
import Storage

/// Feature access, the entitlement snapshot and checks.
struct EntitlementController: Sendable {
    let entitlements: EntitlementService
    let auth: AuthService
    let reads: SessionReads
    let authenticator: Authenticator

    struct CheckRequest: Decodable {
        let feature: String?; let packId: String?; let tokens: Int64?; let action: String?; let quantity: Int?; let attributes: [String: String]?
    }
    struct ReserveRequest: Codable {
        let userId: String; let profileId: String?; let action: String?; let quantity: Int?; let attributes: [String: String]?
        let tokens: Int64?; let packId: String?; let ttlSeconds: Int?; let metadata: JSONValue?; let askToBuy: Bool?
    }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.get("/api/user/feature-access", use: featureAccess)
        router.get("/api/entitlements", use: snapshot)
        router.post("/api/entitlements/check", use: check)
        router.post("/api/entitlements/reserve", use: reserve)
        router.get("/api/users/:id/entitlements", use: userSnapshot)
    }

    @Sendable func featureAccess(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<FeatureAccess> {
        let session = try await authenticator.session(request, context)
        return JSONResponse(try await entitlements.featureAccess(userID: session.user.id, logger: context.logger))
    }

    /// One statement finds the session and reads the snapshot (``SessionReads``); the session is checked like any other.
    @Sendable func snapshot(_ request: Request, context: AppRequestContext) async throws -> Response {
        let hash = try await authenticator.sessionTokenHash(request, context)
        return Self.conditional(try await reads.snapshot(sessionTokenHash: hash, logger: context.logger), request: request)
    }

    @Sendable func check(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<CheckResult> {
        let session = try await authenticator.session(request, context)
        let profile = try await authenticator.permissions(session, context)
        var request = request
        let body = try await request.decodeJSON(CheckRequest.self, context: context)
        return JSONResponse(
            try await entitlements.check(
                userID: session.user.id, profile: profile, feature: body.feature, packID: body.packId, tokens: body.tokens,
                action: Self.call(body.action, body.quantity, body.attributes), logger: context.logger))
    }

    /// Check and reserve for a service (an API key with `entitlements:read` and `ledger:write`, `Idempotency-Key`):
    /// 201 with the hold, or the refusal as a problem whose code is the reason `/api/entitlements/check` gives; with
    /// `askToBuy` for a profile that cannot make purchases, 202 with the pending purchase request.
    @Sendable func reserve(_ request: Request, context: AppRequestContext) async throws -> Response {
        let key = try await authenticator.requireScopes(["entitlements:read", LedgerCallerKeysOfAuth.scope], request, context)
        var request = request
        let body = try await request.decodeJSON(ReserveRequest.self, context: context)
        let identity = IdempotentRequest(
            caller: LedgerCallerKeysOfAuth.name(keyID: key.id), key: try IdempotentResponse.key(request),
            fields: canonicalFields(body, extra: ["endpoint": "reserve"]))
        let input = ReserveInput(
            userID: body.userId, profileID: body.profileId, action: Self.call(body.action, body.quantity, body.attributes), tokens: body.tokens,
            packID: body.packId, ttlSeconds: body.ttlSeconds ?? LedgerLimits.holdTTLSecondsDefault, metadata: body.metadata?.canonicalText,
            askToBuy: body.askToBuy ?? false)
        if body.action == nil, body.quantity != nil || body.attributes != nil {
            throw Problem.validation("quantity and attributes go with an action.")
        }
        return try IdempotentResponse.response(
            try await entitlements.reserve(identity, input, logger: context.logger), ReservationJSON.status, ReservationJSON.init)
    }

    static func call(_ action: String?, _ quantity: Int?, _ attributes: [String: String]?) -> PricedCall? {
        action.map { PricedCall(id: $0, quantity: quantity, attributes: attributes ?? [:]) }
    }

    @Sendable func userSnapshot(_ request: Request, context: AppRequestContext) async throws -> Response {
        _ = try await authenticator.requireScope("entitlements:read", request, context)
        let userID = try context.pathParameter("id")
        // An erased account has no entitlements to read: 404, as for an id that never existed.
        guard try await !auth.findUser(id: userID, logger: context.logger).deleted else { throw Problem.notFound() }
        guard let found = try await entitlements.rendered(subject: .user(userID), logger: context.logger) else {
            throw Problem.notFound("No such user.")
        }
        return Self.conditional(found.snapshot, request: request)
    }

    /// 200 with an ETag, or 304 when `If-None-Match` names the current one. Not stored by caches (`no-store`, personal data):
    /// clients keep the last body and send its ETag themselves.
    static func conditional(_ snapshot: RenderedSnapshot, request: Request) -> Response {
        let etag = snapshot.etag
        if let match = request.headers[.ifNoneMatch], IfNoneMatch.matches(match, etag) {
            return Response(status: .notModified, headers: [.eTag: etag])
        }
        return Response(
            status: .ok, headers: [.contentType: "application/json; charset=utf-8", .eTag: etag],
            body: .init(byteBuffer: ByteBuffer(bytes: snapshot.body)))
    }
}
