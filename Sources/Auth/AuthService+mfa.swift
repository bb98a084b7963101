import Clock
import Foundation
import Logging
import Secrets
import Storage

/// What enrolling shows the user once: the secret for the authenticator app.
public struct TOTPEnrollment: Sendable {
    public let secret: String
    public let otpauthURL: String
}

/// What a password sign-in yields: a session, or (TOTP on) a short-lived single-use challenge for `POST /api/auth/mfa/verify`.
public enum SignInOutcome: Sendable {
    case session(User, IssuedSession)
    case mfaRequired(token: String, expiresAt: Date)
}

/// A second factor: a TOTP code or one of the ten recovery codes.
public enum SecondFactor: Sendable {
    case code(String)
    case recoveryCode(String)

    /// What an operator typed into the console's one field: six digits are a code, anything else a recovery code.
    public static func typed(_ text: String) -> SecondFactor? {
        let typed = text.filter { !$0.isWhitespace }
        guard !typed.isEmpty else { return nil }
        return typed.count == 6 && typed.allSatisfy { $0.isASCII && $0.isNumber } ? .code(typed) : .recoveryCode(typed)
    }
}

extension AuthService {
    static let mfaChallengeSeconds: Double = 300
    static let recoveryCodeCount = 10

    /// Starts (or restarts) TOTP enrolment: a new secret, sealed at rest, not active until ``enableTOTP``.
    public func setupTOTP(
        _ session: AuthenticatedSession, currentPassword: String, issuer: String, client: ClientInfo, logger: Logger
    ) async throws -> TOTPEnrollment {
        try requireOwnerProfile(session)
        // A stolen session must not enroll its own authenticator: the password (or a recent sign-in) first.
        try await requirePresence(session, password: currentPassword, client: client, logger: logger)
        let secret = TOTP.newSecret()
        let sealed = try secrets.totpBox.seal(TOTP.base32(secret))
        try await sessionTransaction(session, logger: logger) { tx in
            if try await tx.first("SELECT enabled_at_ms FROM totp_factors WHERE user_id = ?", [session.user.id])?.optionalInt("enabled_at_ms") != nil
            {
                throw AuthError.conflict("Two-factor codes are already on; turn them off first to enroll another app.")
            }
            try await tx.query(
                """
                INSERT INTO totp_factors (user_id, secret_sealed, enabled_at_ms, last_step, created_at_ms) VALUES (?, ?, NULL, 0, ?)
                ON CONFLICT (user_id) DO UPDATE SET secret_sealed = excluded.secret_sealed, created_at_ms = excluded.created_at_ms
                """, [session.user.id, sealed, clock.now()])
        }
        let encoded = TOTP.base32(secret)
        let label = "\(issuer):\(session.user.email)".addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? issuer
        let issuerParameter = issuer.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed) ?? issuer
        return TOTPEnrollment(secret: encoded, otpauthURL: "otpauth://totp/\(label)?secret=\(encoded)&issuer=\(issuerParameter)&digits=6&period=30")
    }

    /// Turns TOTP on with a first code from the app; returns ten recovery codes (shown once, stored as keyed hashes).
    public func enableTOTP(_ session: AuthenticatedSession, code: String, client: ClientInfo, logger: Logger) async throws -> [String] {
        try requireOwnerProfile(session)
        let attempt = try await reserveSecondFactor(userID: session.user.id, logger: logger)
        let codes = (0..<Self.recoveryCodeCount).map { _ in Self.newRecoveryCode() }
        let result: Result<[String], AuthError> = try await sessionTransaction(session, logger: logger) { tx in
            let now = clock.now()
            guard let row = try await tx.first("SELECT * FROM totp_factors WHERE user_id = ?" + tx.dialect.forUpdate, [session.user.id]) else {
                return .failure(.validation("Start with POST /api/auth/mfa/totp/setup."))
            }
            guard row.optionalInt("enabled_at_ms") == nil else { return .failure(.conflict("Two-factor codes are already on.")) }
            guard let step = try matchingStep(row, code: code, now: now) else { return .failure(wrongFactor(attempt)) }
            try await tx.query("UPDATE totp_factors SET enabled_at_ms = ?, last_step = ? WHERE user_id = ?", [now, step, session.user.id])
            try await tx.query("DELETE FROM recovery_codes WHERE user_id = ?", [session.user.id])
            for recovery in codes {
                try await tx.query(
                    "INSERT INTO recovery_codes (user_id, code_hmac) VALUES (?, ?)",
                    [session.user.id, secrets.recoveryCodeHMAC(recovery, userID: session.user.id)])
            }
            try await sessions.markSecondFactor(tx, sessionID: session.sessionID, now: now)
            try await AuditLog.record(tx, at: now, actor: session.user.id, action: "totp_enabled", subject: session.user.id, ip: client.ip)
            return .success(codes)
        }
        let codesShown = try result.get()
        await send([Mails.twoFactorEnabled(to: session.user.email)], logger: logger)
        return codesShown
    }

    /// Turns TOTP off: the current password (password budget) and a code or a recovery code.
    public func disableTOTP(
        _ session: AuthenticatedSession, factor: SecondFactor, currentPassword: String, client: ClientInfo, logger: Logger
    ) async throws {
        try requireOwnerProfile(session)
        try await requirePresence(session, password: currentPassword, client: client, logger: logger)
        let attempt = try await reserveSecondFactor(userID: session.user.id, logger: logger)
        let result: Result<Void, AuthError> = try await sessionTransaction(session, logger: logger) { tx in
            let now = clock.now()
            guard try await useSecondFactor(tx, userID: session.user.id, factor: factor, now: now) else { return .failure(wrongFactor(attempt)) }
            try await tx.query("DELETE FROM totp_factors WHERE user_id = ?", [session.user.id])
            try await tx.query("DELETE FROM recovery_codes WHERE user_id = ?", [session.user.id])
            try await AuditLog.record(tx, at: now, actor: session.user.id, action: "totp_disabled", subject: session.user.id, ip: client.ip)
            return .success(())
        }
        try result.get()
    }

    /// Completes a password sign-in that asked for a second factor: the challenge is single use and lives five minutes;
    /// tries count against the address's password budget; a TOTP code is refused again within its window (replay).
    public func verifySecondFactor(token: String, factor: SecondFactor, client: ClientInfo, logger: Logger) async throws -> (User, IssuedSession) {
        guard token.utf8.count <= 256 else { throw AuthError.unauthorized }
        let hash = SecretHasher.tokenHash(token)
        let challenge = try await database.withConnection(logger: logger) { tx in
            try await tx.first(
                "SELECT user_id FROM mfa_challenges WHERE token_hash = ? AND used_at_ms IS NULL AND expires_at_ms > ?",
                [hash, clock.now()])
        }
        guard let challenge else { throw AuthError.unauthorized }
        let userID = try challenge.string("user_id")
        let attempt = try await reserveSecondFactor(userID: userID, logger: logger)
        let result: Result<(User, IssuedSession), AuthError> = try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            // The challenge is locked and checked first, so parallel tries on one token never use up a factor for nothing.
            guard
                try await tx.first(
                    "SELECT user_id FROM mfa_challenges WHERE token_hash = ? AND used_at_ms IS NULL" + tx.dialect.forUpdate, [hash]) != nil
            else { return .failure(.unauthorized) }
            guard try await useSecondFactor(tx, userID: userID, factor: factor, now: now) else { return .failure(wrongFactor(attempt)) }
            try await tx.query("UPDATE mfa_challenges SET used_at_ms = ? WHERE token_hash = ?", [now, hash])
            try await AttemptBudget.clear(tx, key: keys.secondFactor(userID: userID))
            let profileID = try await profiles.defaultProfileID(tx, userID: userID)
            let session = try await createSession(tx, userID: userID, profileID: profileID, client: client, now: now)
            try await sessions.markSecondFactor(tx, sessionID: session.id, now: now)
            try await AuditLog.record(tx, at: now, actor: userID, action: "sign_in_mfa", subject: userID, ip: client.ip)
            return .success((try await loadUser(tx, id: userID), session))
        }
        return try result.get()
    }

    /// In a sign-in's transaction: when TOTP is on, a challenge instead of a session.
    func mfaChallenge(_ tx: any SQLExecutor, userID: String, now: Date) async throws -> (token: String, expiresAt: Date)? {
        guard try await tx.first("SELECT enabled_at_ms FROM totp_factors WHERE user_id = ?", [userID])?.optionalInt("enabled_at_ms") != nil else {
            return nil
        }
        let token = SecretHasher.newSessionToken()
        let expires = now.addingTimeInterval(Self.mfaChallengeSeconds)
        try await tx.query(
            "INSERT INTO mfa_challenges (token_hash, user_id, expires_at_ms, created_at_ms) VALUES (?, ?, ?, ?)",
            [SecretHasher.tokenHash(token), userID, expires, now])
        return (token, expires)
    }

    /// With two-factor codes on, an action that adds a way in (a passkey) needs a fresh second factor too — a password
    /// alone must not buy a credential that skips the code at every later sign-in. Uses the factor up (no replay) and
    /// counts against the account's second-factor budget. Without codes on: nothing to check.
    func requireSecondFactorIfEnabled(_ session: AuthenticatedSession, factor: SecondFactor?, logger: Logger) async throws {
        let enabled = try await database.withConnection(logger: logger) { tx in try await secondFactorEnabledAt(tx, userID: session.user.id) != nil }
        guard enabled else { return }
        guard let factor else { throw AuthError.secondFactorRequired }
        let attempt = try await reserveSecondFactor(userID: session.user.id, logger: logger)
        let used: Bool = try await database.transaction(logger: logger) { tx in
            let ok = try await useSecondFactor(tx, userID: session.user.id, factor: factor, now: clock.now())
            if ok { try await AttemptBudget.clear(tx, key: keys.secondFactor(userID: session.user.id)) }
            return ok
        }
        guard used else { throw wrongFactor(attempt) }
    }

    /// When the account's two-factor codes were turned on (nil: they are off).
    func secondFactorEnabledAt(_ tx: any SQLExecutor, userID: String, lock: Bool = false) async throws -> Date? {
        try await tx.first("SELECT enabled_at_ms FROM totp_factors WHERE user_id = ?" + (lock ? tx.dialect.forUpdate : ""), [userID])?
            .optionalDate("enabled_at_ms")
    }

    /// Whether the session showed a second factor (sign-in with TOTP, or enabling it in this session).
    public func sessionHasSecondFactor(sessionID: String, logger: Logger) async throws -> Bool {
        try await sessions.secondFactorAt(database, sessionID: sessionID, logger: logger) != nil
    }

    /// One second-factor try from the account's own budget (reserved before the check, like a password; the password
    /// rule's delays and lock), which only a right second factor clears.
    @discardableResult
    func reserveSecondFactor(userID: String, logger: Logger) async throws -> Int {
        let key = keys.secondFactor(userID: userID)
        let rule = policy.passwordRule
        return try await database.transaction(lane: key, logger: logger) { tx in
            try PasswordCheck.attempt(try await AttemptBudget.reserve(tx, key: key, rule: rule, now: clock.now()))
        }
    }

    func wrongFactor(_ attempt: Int) -> AuthError { .invalidOTP(attemptsRemaining: max(0, policy.passwordRule.limit - attempt)) }

    /// Checks and uses up a factor: a TOTP code newer than the last one used (no replay), or an unused recovery code.
    func useSecondFactor(_ tx: any SQLExecutor, userID: String, factor: SecondFactor, now: Date) async throws -> Bool {
        guard
            let row = try await tx.first(
                "SELECT * FROM totp_factors WHERE user_id = ? AND enabled_at_ms IS NOT NULL" + tx.dialect.forUpdate, [userID])
        else { return false }
        switch factor {
        case .code(let code):
            guard let step = try matchingStep(row, code: code, now: now), step > (try row.int("last_step")) else { return false }
            try await tx.query("UPDATE totp_factors SET last_step = ? WHERE user_id = ?", [step, userID])
            return true
        case .recoveryCode(let code):
            let normalized = code.uppercased().replacingOccurrences(of: "-", with: "")
            guard normalized.utf8.count <= 32 else { return false }
            return
                !(try await tx.query(
                    "UPDATE recovery_codes SET used_at_ms = ? WHERE user_id = ? AND code_hmac = ? AND used_at_ms IS NULL RETURNING user_id",
                    [now, userID, secrets.recoveryCodeHMAC(normalized, userID: userID)])).isEmpty
        }
    }

    func matchingStep(_ row: SQLRow, code: String, now: Date) throws -> Int64? {
        guard let secret = TOTP.base32Decode(try secrets.totpBox.open(try row.string("secret_sealed"))) else { return nil }
        return TOTP.matchingStep(secret: secret, code: code, at: now)
    }

    /// Ten characters from an alphabet without look-alikes, shown as XXXXX-XXXXX.
    static func newRecoveryCode() -> String {
        let alphabet = Array("ABCDEFGHJKMNPQRSTUVWXYZ23456789")
        var generator = SystemRandomNumberGenerator()
        return String((0..<10).map { _ in alphabet[Int.random(in: 0..<alphabet.count, using: &generator)] })
    }
}

extension AuthService {
    /// An operator clears a user's two-factor codes (the user lost the app and the recovery codes), audited, and the user
    /// is told. Returns false when the user had none.
    /// `authorise` runs first in the transaction (the operator's credential must still allow it).
    public func resetTOTP(
        userID: String, actor: String, ip: String?, authorise: @escaping @Sendable (any SQLExecutor) async throws -> Void = { _ in },
        logger: Logger
    ) async throws -> Bool {
        let email: String? = try await database.transaction(logger: logger) { tx in
            try await authorise(tx)
            let now = clock.now()
            guard !(try await tx.query("DELETE FROM totp_factors WHERE user_id = ? RETURNING user_id", [userID])).isEmpty else { return nil }
            try await tx.query("DELETE FROM recovery_codes WHERE user_id = ?", [userID])
            try await tx.query("DELETE FROM mfa_challenges WHERE user_id = ?", [userID])
            try await AttemptBudget.clear(tx, key: keys.secondFactor(userID: userID))
            try await AuditLog.record(tx, at: now, actor: actor, action: "admin_totp_reset", subject: userID, ip: ip)
            return try await users.email(tx, id: userID) ?? ""
        }
        guard let email else { return false }
        if !email.isEmpty { await send([Mails.twoFactorReset(to: email)], logger: logger) }
        return true
    }
}
