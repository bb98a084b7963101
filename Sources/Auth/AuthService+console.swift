import Clock
import Foundation
import Logging
import Storage

/// The operator console's sessions. They are rows of `sessions` (listed, revoked and expired with the account's others),
/// but their stored hash is in the console's own domain (`console:` and the token's SHA-256, where an API session stores
/// the bare hex digest, which never starts with `console:`): no bearer token, whatever its text, hashes to a console
/// session's row, and an API token (or anything else) set as the console's cookie never opens the console.
public struct ConsoleSignIn: Sendable {
    public let email: String
    public let password: String
    /// The TOTP code (or a recovery code) when the operator has two-factor codes on.
    public let code: String?
    public init(email: String, password: String, code: String?) {
        (self.email, self.password, self.code) = (email, password, code)
    }
}

extension AuthService {
    /// A console session ends after this long without a request…
    public static let consoleIdleSeconds: TimeInterval = 15 * 60
    /// …and this long after sign-in in any case.
    public static let consoleAbsoluteSeconds: TimeInterval = 8 * 3600

    static func consoleTokenHash(_ token: String) throws -> String {
        guard !token.isEmpty, token.utf8.count <= 256 else { throw AuthError.unauthorized }
        return "console:" + SecretHasher.tokenHash(token)
    }

    /// Signs an operator in to the console: the password on the same budgets as the API's sign-in (an unknown address and
    /// a wrong password answer alike, after the same Argon2 work), then, when the operator has two-factor codes, the code
    /// on the same second-factor budget. Only role `admin` gets a session; `requireSecondFactor` (`REQUIRE_ADMIN_MFA`)
    /// refuses an operator without codes.
    public func consoleSignIn(
        _ input: ConsoleSignIn, requireSecondFactor: Bool, client: ClientInfo, logger: Logger
    ) async throws -> (User, IssuedSession) {
        guard input.password.utf8.count <= InputRules.passwordBytesMax, input.email.utf8.count <= InputRules.emailBytesMax,
            (input.code?.utf8.count ?? 0) <= 64
        else { throw AuthError.invalidCredentials }
        let email = InputRules.normalizedEmail(input.email) ?? input.email.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
        let attempt = try await reserveSignIn(email: email, ip: client.ip, logger: logger)
        let opened = try await checkPassword(input.password, email: email, attempt: attempt, client: client, logger: logger) { row, storedHash in
            guard row.emailVerified else {
                try await recordFailure(attempt, userID: row.id, client: client, logger: logger)
                throw AuthError.invalidCredentials
            }
            return try await openConsoleSession(
                userID: row.id, checkedHash: storedHash, attempt: attempt, code: input.code, requireSecondFactor: requireSecondFactor,
                client: client, logger: logger)
        }
        if case .success = opened { await refundNetwork(attempt, logger: logger) }
        return try opened.get()
    }

    /// After the password: the role, the second factor, and the session. First the password is counted right, if the
    /// hash it was checked against is still the account's once its row is locked (see
    /// ``signOutEverywhere(_:userID:except:now:)``; nil when it is not, and nothing is written), so a refusal of the
    /// second factor's budget never counts as a wrong password. Then one transaction checks the hash again (a reset in
    /// between wins), the role, the factor (whether the account has one is read again: one turned on meanwhile is asked
    /// for), and opens the session; nothing is written when any of them refuses but the factor's used step and attempt.
    func openConsoleSession(
        userID: String, checkedHash: String, attempt: SignInAttempt, code: String?, requireSecondFactor: Bool, client: ClientInfo,
        logger: Logger
    ) async throws -> Result<(User, IssuedSession), AuthError>? {
        let stands = try await database.transaction(logger: logger) { tx in
            guard try await users.passwordHash(tx, id: userID, liveOnly: true, lock: true) == checkedHash else { return false }
            try await attempt.succeeded(tx, now: clock.now())
            return true
        }
        guard stands else { return nil }
        let factorQuery = "SELECT enabled_at_ms FROM totp_factors WHERE user_id = ?"
        let hasFactor = try await database.withConnection(logger: logger) { tx in
            try await tx.first(factorQuery, [userID])?.optionalInt("enabled_at_ms") != nil
        }
        let factorAttempt: Int
        do { factorAttempt = hasFactor ? try await reserveSecondFactor(userID: userID, logger: logger) : 0 } catch let error as AuthError {
            return .failure(error)
        }
        return try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            guard try await users.passwordHash(tx, id: userID, liveOnly: true, lock: true) == checkedHash,
                (try await tx.first(factorQuery + tx.dialect.forUpdate, [userID])?.optionalInt("enabled_at_ms") != nil) == hasFactor
            else { return .failure(.invalidCredentials) }
            let user = try await loadUser(tx, id: userID)
            guard user.role == "admin" else { return .failure(.forbidden("This account is not an operator (role admin).")) }
            if hasFactor {
                guard let factor = SecondFactor.typed(code ?? ""), try await useSecondFactor(tx, userID: userID, factor: factor, now: now) else {
                    return .failure(wrongFactor(factorAttempt))
                }
                try await AttemptBudget.clear(tx, key: keys.secondFactor(userID: userID))
            } else if requireSecondFactor {
                return .failure(
                    .forbidden("Operators need two-factor codes: enroll with POST /api/auth/mfa/totp/setup and /enable, then sign in again."))
            }
            let token = SecretHasher.newSessionToken()
            let id = FreshID.uuid()
            let expires = now.addingTimeInterval(Self.consoleAbsoluteSeconds)
            let agent = ClientInfo(ip: client.ip, userAgent: "Operator console" + (client.userAgent.map { " · " + $0 } ?? ""))
            try await sessions.insert(
                tx, id: id, userID: userID, tokenHash: try Self.consoleTokenHash(token), expiresAt: expires, client: agent, profileID: nil, now: now)
            if hasFactor { try await sessions.markSecondFactor(tx, sessionID: id, now: now) }
            try await AuditLog.record(tx, at: now, actor: userID, action: "console_sign_in", subject: userID, ip: client.ip)
            return .success((user, IssuedSession(id: id, token: token, expiresAt: min(expires, now.addingTimeInterval(Self.consoleIdleSeconds)))))
        }
    }

    /// The operator behind a console cookie: a live console session of a user who is still an admin and has not been
    /// erased, used within the console's idle time. Anything else is 401.
    public func consoleSession(token: String, logger: Logger) async throws -> AuthenticatedSession {
        let hash = try Self.consoleTokenHash(token)
        let row = try await database.quickQuery(Self.sessionQuery, [hash], logger: logger).first
        guard let row, let lastUsed = try? row.date("last_used_at_ms"), clock.now() < lastUsed.addingTimeInterval(Self.consoleIdleSeconds)
        else { throw AuthError.unauthorized }
        let session = try await session(row: row, logger: logger)
        guard session.user.role == "admin" else { throw AuthError.unauthorized }
        return session
    }

    /// Ends a console session (sign-out), audited.
    public func consoleSignOut(_ session: AuthenticatedSession, ip: String, logger: Logger) async throws {
        try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            guard try await sessions.revoke(tx, id: session.sessionID, userID: session.user.id, now: now) else { return }
            try await AuditLog.record(tx, at: now, actor: session.user.id, action: "console_sign_out", subject: session.user.id, ip: ip)
        }
    }
}
