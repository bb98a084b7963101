import Auth
import Entitlements
import Foundation
import Hummingbird

/// Who is calling: end users by session token, services and operators by API key, operators also by an
/// admin user's session. Both are sent as `Authorization: Bearer …`.
struct Authenticator: Sendable {
    let auth: AuthService
    let apiKeys: APIKeyService

    /// The end user's live session (API keys are not sessions).
    func session(_ request: Request, _ context: AppRequestContext) async throws -> AuthenticatedSession {
        guard let token = Self.bearerToken(request), !token.hasPrefix(APIKeyService.prefix) else { throw AuthError.unauthorized }
        return try await auth.authenticate(token: token, logger: context.logger)
    }

    /// The bind of `AuthService.sessionQuery` for the request's bearer token, for statements that look the session up
    /// themselves (then `AuthService.session(row:logger:)` checks it).
    func sessionTokenHash(_ request: Request) throws -> String {
        guard let token = Self.bearerToken(request), !token.hasPrefix(APIKeyService.prefix) else { throw AuthError.unauthorized }
        return try AuthService.sessionTokenHash(token)
    }

    /// An operator: a user with role admin, or an API key with scope admin. Returns the audit actor.
    func requireOperator(_ request: Request, _ context: AppRequestContext) async throws -> String {
        guard let token = Self.bearerToken(request) else { throw AuthError.unauthorized }
        if token.hasPrefix(APIKeyService.prefix) {
            return "key:" + (try await requireScope("admin", request, context)).id
        }
        let session = try await auth.authenticate(token: token, logger: context.logger)
        guard session.user.role == "admin" else { throw AuthError.forbidden("This needs an operator (role admin or an API key with scope admin).") }
        return "user:" + session.user.id
    }

    /// A live API key carrying `scope`: missing/unknown → 401, wrong scope → 403.
    func requireScope(_ scope: String, _ request: Request, _ context: AppRequestContext) async throws -> APIKey {
        guard let token = Self.bearerToken(request), let key = try await apiKeys.authenticate(secret: token, logger: context.logger) else {
            throw AuthError.unauthorized
        }
        guard key.allows(scope) else { throw AuthError.forbidden("This API key lacks the scope '\(scope)'.") }
        return key
    }

    /// The `userId` path parameter of an operator route, when such a user exists (else 404).
    func existingUser(_ context: AppRequestContext) async throws -> String {
        let id = try context.parameters.require("userId")
        _ = try await auth.findUser(id: id, logger: context.logger)
        return id
    }

    /// The session's selected profile (the default one when none is selected).
    func permissions(_ session: AuthenticatedSession, _ context: AppRequestContext) async throws -> ProfilePermissions? {
        try await auth.activeProfile(selectedID: session.selectedProfileID, userID: session.user.id, logger: context.logger).map {
            ProfilePermissions(id: $0.id, name: $0.name, canMakePurchases: $0.canMakePurchases, canUseCustomContentTypes: $0.canUseCustomContentTypes)
        }
    }

    /// The credential of `Authorization: Bearer …` (scheme case-insensitive, surrounding spaces and tabs dropped).
    /// Byte-wise: this runs on every authenticated request.
    static func bearerToken(_ request: Request) -> String? {
        guard let header = request.headers[.authorization] else { return nil }
        let bytes = Array(header.utf8)
        let scheme = Array("bearer ".utf8)
        guard bytes.count > scheme.count, zip(bytes, scheme).allSatisfy({ ($0 | 0x20) == $1 }) else { return nil }
        var start = scheme.count
        var end = bytes.count
        while start < end, bytes[start] == 0x20 || bytes[start] == 0x09 { start += 1 }
        while end > start, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 { end -= 1 }
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }
}
