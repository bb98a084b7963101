import Clock
import Foundation
import Logging
import Storage

/// Presence: what a session must show before an action that a stolen session must not take alone. One rule, two strengths,
/// both on ``AuthPolicy/isRecent(authenticatedAt:now:)``:
/// - ``requirePresence(_:password:client:logger:)``: the password now (email change, two-factor and passkey changes,
///   unlinking, erasure); an account without one shows a recent sign-in instead;
/// - ``requireRecentAuthentication(_:logger:)`` and ``recentOperator(_:)``: a recent sign-in or confirmation
///   (``reauthenticate(_:password:factor:client:logger:)``, `POST /api/auth/reauthenticate`: what a sign-in asks), for an
///   operator's session making lasting access (API keys, webhook endpoints and their secrets, clearing someone's
///   two-factor codes). PIN changes take either (`ProfileService`). Changing the password makes a session recent only
///   where the password is all a sign-in asks.
extension AuthService {
    /// A check of the caller's credential that another module runs first in its write's transaction.
    public typealias Authorisation = @Sendable (any SQLExecutor) async throws -> Void

    /// A password check behind a session, or for an account without a password a recent sign-in.
    func requirePresence(_ session: AuthenticatedSession, password: String, client: ClientInfo, logger: Logger) async throws {
        if try await hasPassword(userID: session.user.id, logger: logger) {
            try await passwords.require(password, of: session.user, ip: client.ip, logger: logger)
        } else if !policy.isRecent(authenticatedAt: session.authenticatedAt, now: clock.now()) {
            throw AuthError.forbidden("Sign in again (with Apple or a passkey), then retry within 10 minutes.")
        }
    }

    /// The session signed in or confirmed its password recently; else 403 `reauthentication_required`. A plain read, before
    /// the request's work: the write's own transaction checks again (``recentOperator(_:)``).
    public func requireRecentAuthentication(_ session: AuthenticatedSession, logger: Logger) async throws {
        let authenticatedAt = try await database.withConnection(logger: logger) { tx in
            try await sessions.authenticatedAt(tx, sessionID: session.sessionID)
        }
        guard let authenticatedAt else { throw AuthError.unauthorized }
        guard policy.isRecent(authenticatedAt: authenticatedAt, now: clock.now()) else { throw AuthError.reauthenticationRequired }
    }

    /// The operator's check inside the transaction of the write it allows (another module's): the session is still live,
    /// its account still an operator, its authentication still recent. A revocation, a reset, a demotion or the end of
    /// the window that comes while the request waits (a slow body, a DNS lookup) refuses the write.
    public func recentOperator(_ session: AuthenticatedSession) -> Authorisation {
        let (clock, policy, sessions, users) = (self.clock, self.policy, self.sessions, self.users)
        return { tx in
            let now = clock.now()
            try await session.requireStillLive(tx, now: now)
            guard try await users.user(tx, id: session.user.id)?.role == "admin" else { throw AuthError.unauthorized }
            // The session as it is now: a confirmation from another request counts.
            guard let authenticatedAt = try await sessions.authenticatedAt(tx, sessionID: session.sessionID) else { throw AuthError.unauthorized }
            guard policy.isRecent(authenticatedAt: authenticatedAt, now: now) else { throw AuthError.reauthenticationRequired }
        }
    }

    /// Confirms the account's password behind a live session (owner profile only; the password budget of sign-in), and with
    /// two-factor codes on a code or recovery code as well (their own budget): what a sign-in would ask. The session's
    /// authentication is then recent again; returns until when it counts as recent.
    public func reauthenticate(
        _ session: AuthenticatedSession, password: String, factor: SecondFactor?, client: ClientInfo, logger: Logger
    ) async throws -> Date {
        try requireOwnerProfile(session)
        guard password.utf8.count <= InputRules.passwordBytesMax else {
            throw AuthError.validation("Field 'password' must be at most \(InputRules.passwordBytesMax) bytes.")
        }
        let (hasPassword, twoFactor) = try await database.withConnection(logger: logger) { tx in
            (try await users.passwordHash(tx, id: session.user.id) != nil, try await secondFactorEnabledAt(tx, userID: session.user.id) != nil)
        }
        guard hasPassword else { throw AuthError.forbidden("This account has no password: sign in again (with Apple or a passkey) instead.") }
        if twoFactor && factor == nil { throw AuthError.secondFactorRequired }
        let checked = try await passwords.require(password, of: session.user, ip: client.ip, logger: logger)
        let attempt = twoFactor ? try await reserveSecondFactor(userID: session.user.id, logger: logger) : 0
        let outcome: Result<Date, AuthError> = try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            // A reset that committed during the Argon2 work wins: the password checked must still be the account's; so do
            // two-factor codes turned on or off meanwhile (the confirmation is asked again).
            guard try await users.passwordHash(tx, id: session.user.id, liveOnly: true, lock: true) == checked else {
                return .failure(.invalidPassword)
            }
            guard (try await secondFactorEnabledAt(tx, userID: session.user.id, lock: true) != nil) == twoFactor else {
                return .failure(.secondFactorRequired)
            }
            if twoFactor, let factor {
                guard try await useSecondFactor(tx, userID: session.user.id, factor: factor, now: now) else { return .failure(wrongFactor(attempt)) }
                try await AttemptBudget.clear(tx, key: keys.secondFactor(userID: session.user.id))
            }
            guard try await sessions.markAuthenticated(tx, sessionID: session.sessionID, now: now) else { return .failure(.unauthorized) }
            try await AuditLog.record(tx, at: now, actor: session.user.id, action: "reauthenticated", subject: session.user.id, ip: client.ip)
            return .success(now.addingTimeInterval(policy.recentAuthenticationSeconds))
        }
        return try outcome.get()
    }
}
