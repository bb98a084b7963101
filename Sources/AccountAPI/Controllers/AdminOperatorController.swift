import Auth
import Foundation
import Hummingbird

/// Operators manage API keys over HTTP and read the audit trail.
struct AdminOperatorController: Sendable {
    let auth: AuthService
    let apiKeys: APIKeyService
    let authenticator: Authenticator

    struct CreateKeyRequest: Decodable { let name: String; let scopes: [String]; let expiresAt: String? }

    struct APIKeyJSON: ExplicitNulls, Sendable {
        let id: String; let name: String; let scopes: [String]; let createdAt: String; let lastUsedAt: String?; let expiresAt: String?
        let revokedAt: String?; let active: Bool
        init(_ k: APIKey) {
            (id, name, scopes, createdAt) = (k.id, k.name, k.scopes.sorted(), ISODate.string(k.createdAt))
            (lastUsedAt, expiresAt, revokedAt) = (k.lastUsedAt.map(ISODate.string), k.expiresAt.map(ISODate.string), k.revokedAt.map(ISODate.string))
            active = k.isActive
        }
    }
    struct CreatedKeyJSON: Encodable, Sendable {
        let key: String; let apiKey: APIKeyJSON
        func encode(to encoder: any Encoder) throws {
            try apiKey.encode(to: encoder)
            var c = encoder.container(keyedBy: Keys.self)
            try c.encode(key, forKey: .key)
        }
        enum Keys: String, CodingKey { case key }
    }
    struct KeysJSON: Encodable, Sendable { let apiKeys: [APIKeyJSON] }

    struct AuditEntryJSON: ExplicitNulls, Sendable {
        let id: String; let at: String; let actor: String; let action: String; let subject: String?; let ip: String?; let detail: String?
        init(_ e: AuditEntry) {
            (id, at, actor, action, subject, ip, detail) = (e.id, ISODate.string(e.at), e.actor, e.action, e.subject, e.ip, e.detail)
        }
    }
    struct AuditJSON: ExplicitNulls, Sendable {
        let entries: [AuditEntryJSON]; let nextCursor: String?
    }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.post("/api/admin/api-keys", use: createKey)
        router.get("/api/admin/api-keys", use: listKeys)
        router.delete("/api/admin/api-keys/:id", use: revokeKey)
        router.get("/api/admin/audit", use: audit)
    }

    @Sendable func createKey(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<CreatedKeyJSON> {
        let access = try await authenticator.operatorMakingAccess(request, context)
        var request = request
        let body = try await request.decodeJSON(CreateKeyRequest.self, context: context)
        let (key, secret) = try await apiKeys.create(
            name: body.name, scopes: body.scopes, expiresAt: try ISODate.parse(body.expiresAt, field: "expiresAt"), actor: access.actor,
            ip: context.clientIP, createdBy: access.credential, authorise: access.authorise, logger: context.logger)
        return JSONResponse(CreatedKeyJSON(key: secret, apiKey: APIKeyJSON(key)), status: .created)
    }

    @Sendable func listKeys(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<KeysJSON> {
        _ = try await authenticator.requireOperator(request, context)
        return JSONResponse(KeysJSON(apiKeys: try await apiKeys.list(logger: context.logger).map(APIKeyJSON.init)))
    }

    @Sendable func revokeKey(_ request: Request, context: AppRequestContext) async throws -> Response {
        let actor = try await authenticator.requireOperator(request, context)
        let id = try context.pathParameter("id")
        guard try await apiKeys.revoke(id: id, actor: actor, ip: context.clientIP, logger: context.logger) else {
            throw Problem.notFound("No live API key with id \(id.prefix(64)).")
        }
        return Response(status: .noContent)
    }

    @Sendable func audit(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<AuditJSON> {
        _ = try await authenticator.requireOperator(request, context)
        let parameters = request.uri.queryParameters
        var query = AuditQuery()
        func text(_ name: String) throws -> String? {
            guard let raw = parameters[Substring(name)].map(String.init) else { return nil }
            guard !raw.isEmpty, raw.utf8.count <= 200 else { throw Problem.validation("Query '\(name)' must be 1 to 200 bytes.") }
            return raw
        }
        (query.userID, query.actor, query.action, query.cursor) = (try text("userId"), try text("actor"), try text("action"), try text("cursor"))
        query.since = try ISODate.parse(try text("since"), field: "since")
        if let raw = try text("limit") {
            guard let n = Int(raw), (1...AuditLog.pageMax).contains(n) else {
                throw Problem.validation("Query 'limit' must be a whole number from 1 to \(AuditLog.pageMax).")
            }
            query.limit = n
        }
        let page = try await auth.auditTrail(query, logger: context.logger)
        return JSONResponse(AuditJSON(entries: page.entries.map(AuditEntryJSON.init), nextCursor: page.nextCursor))
    }
}
