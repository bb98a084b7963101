import Auth
import Entitlements
import Foundation
import Hummingbird

/// Who is calling: end users by session token, services and operators by API key, operators also by an
/// admin user's session. Both are sent as `Authorization: Bearer …`.
struct Authenticator: Sendable {
    let auth: AuthService
    let apiKeys: APIKeyService
    let profiles: ProfileService
    /// `REQUIRE_ADMIN_MFA`: an admin's session acts as an operator only after a second factor.
    var requireAdminMFA = false

    /// The end user's live session. API keys are not sessions: a live key answers 403 `session_required` (the credential
    /// is fine, the endpoint is for users), anything else 401.
    func session(_ request: Request, _ context: AppRequestContext) async throws -> AuthenticatedSession {
        guard let token = Self.bearerToken(request) else { throw AuthError.unauthorized }
        if token.hasPrefix(APIKeyService.prefix) { throw try await refusal(apiKey: token, context) }
        let session = try await auth.authenticate(token: token, logger: context.logger)
        context.credentials?.record(.session(token: token, profileID: session.selectedProfileID))
        return session
    }

    /// The bind of `AuthService.sessionQuery` for the request's bearer token, for statements that look the session up
    /// themselves (then `AuthService.session(row:logger:)` checks it). An API key is refused as in ``session(_:_:)``.
    func sessionTokenHash(_ request: Request, _ context: AppRequestContext) async throws -> String {
        guard let token = Self.bearerToken(request) else { throw AuthError.unauthorized }
        if token.hasPrefix(APIKeyService.prefix) { throw try await refusal(apiKey: token, context) }
        return try AuthService.sessionTokenHash(token)
    }

    /// Why an API key cannot call a user's endpoint: 403 when it is a live key, 401 when it is not a key at all.
    private func refusal(apiKey token: String, _ context: AppRequestContext) async throws -> any Error {
        guard try await apiKeys.authenticate(secret: token, logger: context.logger) != nil else { return AuthError.unauthorized }
        return Problem(
            .forbidden, code: "session_required",
            detail: "This endpoint acts for a signed-in user: send a session token (from sign-in or verify-otp), not an API key.")
    }

    /// The credentials the request was authenticated with, once more, after a body that arrived after they were first
    /// checked (chunked, over 64 KiB, uploads): each must still be live, and a session must still act as the same
    /// profile (a new PIN makes sessions that had unlocked it choose again). 401 or 403 `profile_selection_required`.
    func recheck(_ credentials: RequestCredentials, _ context: AppRequestContext) async throws {
        for used in credentials.all {
            switch used {
            case .session(let token, let profileID):
                guard try await auth.authenticate(token: token, logger: context.logger).selectedProfileID == profileID else {
                    throw AuthError.profileSelectionRequired
                }
            case .apiKey(let secret):
                guard try await apiKeys.authenticate(secret: secret, logger: context.logger) != nil else { throw Self.keyMissing }
            case .console(let token):
                _ = try await auth.consoleSession(token: token, logger: context.logger)
            }
        }
    }

    /// An operator: a user with role admin, or an API key with scope admin. Returns the audit actor.
    func requireOperator(_ request: Request, _ context: AppRequestContext) async throws -> String {
        try await operatorCredential(request, context).actor
    }

    /// The operator's credential itself, for a write that must check it again when it commits (a key made by it).
    func operatorCredential(_ request: Request, _ context: AppRequestContext) async throws -> APIKeyService.Creator {
        guard let token = Self.bearerToken(request) else { throw AuthError.unauthorized }
        if token.hasPrefix(APIKeyService.prefix) {
            return .key(try await requireScope("admin", request, context))
        }
        let session = try await auth.authenticate(token: token, logger: context.logger)
        guard session.user.role == "admin" else { throw AuthError.forbidden("This needs an operator (role admin or an API key with scope admin).") }
        // An operator's session acting as one of the account's other profiles (a child on a shared device) has the
        // profile's power, not the operator's: it may not even read the account's history.
        try auth.requireOwnerProfile(session)
        if requireAdminMFA, try await !auth.sessionHasSecondFactor(sessionID: session.sessionID, logger: context.logger) {
            throw Problem(
                .forbidden, code: "mfa_required",
                detail: "Operators need two-factor codes: enroll with POST /api/auth/mfa/totp/setup and /enable, then sign in again.")
        }
        context.credentials?.record(.session(token: token, profileID: session.selectedProfileID))
        return .session(session)
    }

    /// An operator making lasting access (an API key, a webhook endpoint or its secret): a session must also have signed in
    /// or confirmed its password recently (403 `reauthentication_required`), checked now and again in the write's
    /// transaction (`authorise`), so that a stolen session cannot leave a credential behind that outlives it. A key is a
    /// credential already: the write's transaction only checks that it is still live.
    func operatorMakingAccess(_ request: Request, _ context: AppRequestContext) async throws -> LastingAccess {
        let credential = try await operatorCredential(request, context)
        switch credential {
        case .session(let session):
            try await auth.requireRecentAuthentication(session, logger: context.logger)
            return LastingAccess(credential: credential, authorise: auth.recentOperator(session))
        case .key(let key): return LastingAccess(credential: credential, authorise: apiKeys.stillLive(key))
        case .commandLine: return LastingAccess(credential: credential, authorise: { _ in })
        }
    }

    struct LastingAccess: Sendable {
        let credential: APIKeyService.Creator
        /// Runs first in the write's transaction.
        let authorise: AuthService.Authorisation
        var actor: String { credential.actor }
    }

    /// A live API key carrying `scope`: missing or unknown → 401, a user's live session → 403 `api_key_required`, a key
    /// without the scope → 403 `forbidden`.
    func requireScope(_ scope: String, _ request: Request, _ context: AppRequestContext) async throws -> APIKey {
        try await requireScopes([scope], request, context)
    }

    /// An API key holding every one of `scopes` (the first one missing is named in the 403).
    func requireScopes(_ scopes: [String], _ request: Request, _ context: AppRequestContext) async throws -> APIKey {
        let scope = scopes.joined(separator: "' and '")
        guard let token = Self.bearerToken(request) else { throw Self.keyMissing }
        guard token.hasPrefix(APIKeyService.prefix) else {
            do { _ = try await auth.authenticate(token: token, logger: context.logger) } catch AuthError.unauthorized { throw Self.keyMissing }
            throw Problem(
                .forbidden, code: "api_key_required",
                detail:
                    "This endpoint is for services: send an API key with the scope '\(scope)' (account-service api-key create), not a user's session."
            )
        }
        guard let key = try await apiKeys.authenticate(secret: token, logger: context.logger) else { throw Self.keyMissing }
        if let missing = scopes.first(where: { !key.allows($0) }) { throw AuthError.forbidden("This API key lacks the scope '\(missing)'.") }
        context.credentials?.record(.apiKey(secret: token))
        return key
    }

    /// 401 on a service endpoint, worded for services.
    static let keyMissing = Problem.unauthorized("The API key is missing or revoked; send Authorization: Bearer ask_….")

    /// The `userId` path parameter of an operator route, when such a user exists (else 404).
    func existingUser(_ context: AppRequestContext) async throws -> String {
        let id = try context.pathParameter("userId")
        _ = try await auth.findUser(id: id, logger: context.logger)
        return id
    }

    /// Like ``existingUser(_:)``, but an erased account is 404 too: for changes (an erased account takes no new plan).
    func liveUser(_ context: AppRequestContext) async throws -> String {
        let id = try context.pathParameter("userId")
        guard try await !auth.findUser(id: id, logger: context.logger).deleted else { throw Problem.notFound("User \(id.prefix(64)) was erased.") }
        return id
    }

    /// The permissions of the profile the session acts as (the default one when none is selected). A selection that was
    /// deleted or is locked by a downgrade is 403 `profile_selection_required`: never the owner's permissions.
    func permissions(_ session: AuthenticatedSession, _ context: AppRequestContext) async throws -> ProfilePermissions? {
        let current = try await profile(of: session, context)
        if current == .selectionRequired { throw AuthError.profileSelectionRequired }
        return current.profile.map(ProfilePermissions.init)
    }

    /// The profile the session acts as, re-checked against the current plan.
    func profile(of session: AuthenticatedSession, _ context: AppRequestContext) async throws -> SessionProfile {
        try await profiles.sessionProfile(session, logger: context.logger)
    }

    /// The credential of `Authorization: Bearer …`: the scheme (case-insensitive) and a space, as RFC 6750 writes it (a tab
    /// there is no separator: 401); more spaces and tabs around the credential are dropped.
    /// Byte-wise: this runs on every authenticated request.
    static func bearerToken(_ request: Request) -> String? {
        request.headers[.authorization].flatMap(bearerToken(header:))
    }

    /// The same from the header's value.
    static func bearerToken(header: String) -> String? {
        let bytes = header.utf8
        let scheme: StaticString = "bearer "
        guard bytes.count > scheme.utf8CodeUnitCount,
            scheme.withUTF8Buffer({ zip(bytes, $0).allSatisfy { pair in (pair.0 | 0x20) == pair.1 } })
        else { return nil }
        let blank: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 }
        let token = bytes.dropFirst(scheme.utf8CodeUnitCount).drop(while: blank)
        let end = token.lastIndex(where: { !blank($0) }).map { token.index(after: $0) } ?? token.startIndex
        return String(Substring(token[token.startIndex..<end]))
    }
}
