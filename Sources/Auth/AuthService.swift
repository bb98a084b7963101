import Foundation
import Logging
import Storage

/// Sign-up, email codes, sign-in, sessions, password reset and the account itself.
///
/// Every multi-row change runs in one transaction; mail is sent after the commit. Counters that must be
/// shared between service nodes (send budgets, sign-in failures, code attempts) live in the database.
public struct AuthService: Sendable {
    let database: any Database
    let hasher: PasswordHasher
    let secrets: SecretHasher
    let mailer: any Mailer
    let clock: any TimeSource
    public let policy: AuthPolicy
    let welcome: any WelcomeTokenGrant
    let welcomeTokens: Int

    public init(
        database: any Database, hasher: PasswordHasher, secrets: SecretHasher, mailer: any Mailer, clock: any TimeSource,
        policy: AuthPolicy = AuthPolicy(), welcome: any WelcomeTokenGrant = RecordedWelcomeTokenGrant(), welcomeTokens: Int
    ) {
        self.database = database
        self.hasher = hasher
        self.secrets = secrets
        self.mailer = mailer
        self.clock = clock
        self.policy = policy
        self.welcome = welcome
        self.welcomeTokens = welcomeTokens
    }

    // MARK: - Sign-up and verification

    /// Creates (or refreshes) an unverified account and mails a code. Known addresses get a notice instead,
    /// with the same answer, so the endpoint cannot be used to learn who has an account.
    public func signUp(email rawEmail: String, password: String, name rawName: String, client: ClientInfo, logger: Logger) async throws {
        guard let email = InputRules.normalizedEmail(rawEmail) else { throw AuthError.validation("Enter a valid email address.") }
        if let problem = InputRules.passwordProblem(password) { throw AuthError.validation(problem) }
        if let problem = InputRules.nameProblem(rawName) { throw AuthError.validation(problem) }
        let name = rawName.trimmingCharacters(in: .whitespacesAndNewlines)
        let passwordHash = try await hashPassword(password)
        var attempt = 0
        while true {
            attempt += 1
            do {
                let mails = try await database.transaction(logger: logger) { tx in
                    try await self.signUpTransaction(tx, email: email, name: name, passwordHash: passwordHash, client: client)
                }
                await send(mails, logger: logger)
                return
            } catch StorageError.uniqueViolation where attempt < 3 {
                continue  // a concurrent sign-up for the same address created the row first: take the existing-account path
            }
        }
    }

    private func signUpTransaction(_ tx: any SQLExecutor, email: String, name: String, passwordHash: String, client: ClientInfo) async throws
        -> [MailMessage]
    {
        let now = clock.now()
        let existing = try await tx.first(
            "SELECT id, email_verified FROM users WHERE email = ? AND deleted_at_ms IS NULL" + tx.dialect.forUpdate, [email])
        let budget = try await takeMailBudget(tx, email: email, now: now)
        if let existing, try existing.bool("email_verified") {
            try await AuditLog.record(tx, at: now, actor: "anonymous", action: "sign_up_existing", subject: try existing.string("id"), ip: client.ip)
            guard case .allowed = budget else { return [] }
            return [Mails.existingAccount(to: email)]
        }
        if let existing {
            try await tx.query(
                "UPDATE users SET name = ?, password_hash = ?, updated_at_ms = ? WHERE id = ?", [name, passwordHash, now, try existing.string("id")])
        } else {
            try await tx.query(
                """
                INSERT INTO users (id, email, name, password_hash, email_verified, role, prompt_enhancement_enabled, created_at_ms, updated_at_ms)
                VALUES (?, ?, ?, ?, ?, 'user', ?, ?, ?)
                """, [UUID().uuidString.lowercased(), email, name, passwordHash, false, true, now, now])
        }
        guard case .allowed = budget else { return [] }
        let code = try await issueCode(tx, email: email, purpose: .verify, now: now)
        return [Mails.verificationCode(to: email, code: code, minutes: Int(policy.codeLifetimeSeconds / 60))]
    }

    /// The result of a successful verification.
    public struct Verification: Sendable {
        public let user: User
        public let session: IssuedSession
        public let welcomeTokens: Int
    }

    /// Checks a sign-up code; on success verifies the address, creates the default profile, grants the
    /// welcome tokens once and opens a session.
    public func verifyEmail(email rawEmail: String, code: String, client: ClientInfo, logger: Logger) async throws -> Verification {
        guard let email = InputRules.normalizedEmail(rawEmail) else { throw AuthError.validation("Enter a valid email address.") }
        try Self.checkCodeFormat(code)
        let outcome: Result<Verification, AuthError> = try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            let check = try await consumeCode(tx, email: email, purpose: .verify, code: code, now: now)
            guard case .ok = check else { return .failure(check.error) }
            guard let row = try await tx.first("SELECT \(User.columns) FROM users WHERE email = ? AND deleted_at_ms IS NULL", [email]) else {
                return .failure(.invalidOTP(attemptsRemaining: 0))
            }
            let userID = try row.string("id")
            try await tx.query("UPDATE users SET email_verified = ?, updated_at_ms = ? WHERE id = ?", [true, now, userID])
            let profileID = try await ensureDefaultProfile(tx, userID: userID, name: try row.string("name"), now: now)
            let granted = try await welcome.grantWelcomeTokens(userID: userID, amountTokens: welcomeTokens, at: now, executor: tx)
            _ = try await rememberDevice(tx, userID: userID, client: client, now: now)
            let session = try await createSession(tx, userID: userID, profileID: profileID, client: client, now: now)
            try await AuditLog.record(tx, at: now, actor: userID, action: "email_verified", subject: userID, ip: client.ip)
            let user = try await loadUser(tx, id: userID)
            return .success(Verification(user: user, session: session, welcomeTokens: granted))
        }
        return try outcome.get()
    }

    /// Mails a fresh sign-up code, within the 60-second cooldown and the hourly budget per address. The
    /// budget is tracked for every address asked about, so the answers do not reveal which ones exist.
    public func resendCode(email rawEmail: String, logger: Logger) async throws {
        guard let email = InputRules.normalizedEmail(rawEmail) else { throw AuthError.validation("Enter a valid email address.") }
        let outcome: Result<[MailMessage], AuthError> = try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            let budget = try await takeMailBudget(tx, email: email, now: now)
            switch budget {
            case .cooldown(let seconds):
                return .failure(.rateLimited(retryAfterSeconds: seconds, detail: "Wait before requesting another code."))
            case .exhausted(let seconds):
                return .failure(.rateLimited(retryAfterSeconds: seconds, detail: "Too many codes requested for this address; try again later."))
            case .allowed:
                let user = try await tx.first("SELECT email_verified FROM users WHERE email = ? AND deleted_at_ms IS NULL", [email])
                guard let user, try !user.bool("email_verified") else { return .success([]) }
                let code = try await issueCode(tx, email: email, purpose: .verify, now: now)
                return .success([Mails.verificationCode(to: email, code: code, minutes: Int(policy.codeLifetimeSeconds / 60))])
            }
        }
        await send(try outcome.get(), logger: logger)
    }

    // MARK: - Sign-in

    /// Checks the password and opens a session. Unknown addresses and wrong passwords answer the same,
    /// after the same Argon2 work; failures are throttled per address and per client IP.
    public func signIn(email rawEmail: String, password: String, client: ClientInfo, logger: Logger) async throws -> (User, IssuedSession) {
        let email = InputRules.normalizedEmail(rawEmail) ?? rawEmail.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
        let accountKey = "acct:" + secrets.addressKey(email)
        let ipKey = "ip:" + client.ip
        try await checkThrottles(accountKey: accountKey, ipKey: ipKey, logger: logger)
        let row = try await database.withConnection(logger: logger) { tx in
            try await tx.first(
                "SELECT id, password_hash, email_verified FROM users WHERE email = ? AND deleted_at_ms IS NULL AND password_hash IS NOT NULL", [email])
        }
        let storedHash = row?.optionalString("password_hash")
        let matches = try await hasher.verify(password, encoded: storedHash ?? hasher.dummyHash) && storedHash != nil
        guard matches, let row, let storedHash else {
            try await recordFailure(accountKey: accountKey, ipKey: ipKey, userID: row?.optionalString("id"), client: client, logger: logger)
            throw AuthError.invalidCredentials
        }
        let userID = try row.string("id")
        let rehash = hasher.needsRehash(storedHash) ? try await hashPassword(password) : nil
        let outcome: Result<(User, IssuedSession, [MailMessage]), AuthError> = try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            try await tx.query("DELETE FROM sign_in_throttles WHERE throttle_key = ?", [accountKey])
            guard try row.bool("email_verified") else { return .failure(.emailNotVerified) }
            if let rehash { try await tx.query("UPDATE users SET password_hash = ?, updated_at_ms = ? WHERE id = ?", [rehash, now, userID]) }
            let profileID = try await tx.first("SELECT id FROM family_profiles WHERE user_id = ? AND is_default", [userID])?.optionalString("id")
            let session = try await createSession(tx, userID: userID, profileID: profileID, client: client, now: now)
            let newDevice = try await rememberDevice(tx, userID: userID, client: client, now: now)
            try await AuditLog.record(tx, at: now, actor: userID, action: "sign_in", subject: userID, ip: client.ip)
            let user = try await loadUser(tx, id: userID)
            let mails = newDevice ? [Mails.newDevice(to: user.email, client: client, at: now)] : []
            return .success((user, session, mails))
        }
        let (user, session, mails) = try outcome.get()
        await send(mails, logger: logger)
        return (user, session)
    }

    private func checkThrottles(accountKey: String, ipKey: String, logger: Logger) async throws {
        let rows = try await database.withConnection(logger: logger) { tx in
            try await tx.query(
                "SELECT throttle_key, failures, last_failure_at_ms, locked_until_ms FROM sign_in_throttles WHERE throttle_key IN (?, ?)",
                [accountKey, ipKey])
        }
        let now = clock.now()
        for row in rows {
            let key = try row.string("throttle_key")
            if let lockedUntil = row.optionalDate("locked_until_ms"), lockedUntil > now {
                let seconds = Int(lockedUntil.timeIntervalSince(now).rounded(.up))
                if key == accountKey { throw AuthError.accountLocked(retryAfterSeconds: seconds) }
                throw AuthError.rateLimited(retryAfterSeconds: seconds, detail: "Too many failed sign-ins from this network; try again later.")
            }
            guard key == accountKey else { continue }
            let failures = Int(try row.int("failures"))
            let waitUntil = try row.date("last_failure_at_ms").addingTimeInterval(policy.delaySeconds(afterFailures: failures))
            if waitUntil > now {
                throw AuthError.rateLimited(
                    retryAfterSeconds: Int(waitUntil.timeIntervalSince(now).rounded(.up)), detail: "Too many failed sign-ins; wait before trying again.")
            }
        }
    }

    private func recordFailure(accountKey: String, ipKey: String, userID: String?, client: ClientInfo, logger: Logger) async throws {
        let mails: [MailMessage] = try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            var mails: [MailMessage] = []
            for (key, limit) in [(accountKey, policy.signInFailuresToLock), (ipKey, policy.ipFailuresToLock)] {
                let staleBefore = now.addingTimeInterval(-policy.lockSeconds)
                let row = try await tx.first(
                    """
                    INSERT INTO sign_in_throttles (throttle_key, failures, last_failure_at_ms, locked_until_ms) VALUES (?, 1, ?, NULL)
                    ON CONFLICT (throttle_key) DO UPDATE SET
                        failures = CASE WHEN sign_in_throttles.last_failure_at_ms < ? OR sign_in_throttles.locked_until_ms IS NOT NULL
                                        THEN 1 ELSE sign_in_throttles.failures + 1 END,
                        locked_until_ms = NULL,
                        last_failure_at_ms = excluded.last_failure_at_ms
                    RETURNING failures
                    """, [key, now, staleBefore])
                let failures = try row?.int("failures") ?? 1
                guard failures >= Int64(limit) else { continue }
                try await tx.query(
                    "UPDATE sign_in_throttles SET locked_until_ms = ? WHERE throttle_key = ?", [now.addingTimeInterval(policy.lockSeconds), key])
                let isAccount = key == accountKey
                try await AuditLog.record(
                    tx, at: now, actor: "system", action: isAccount ? "account_locked" : "ip_locked", subject: isAccount ? userID : nil, ip: client.ip)
                if isAccount, let userID, let email = try await tx.first("SELECT email FROM users WHERE id = ?", [userID])?.optionalString("email") {
                    mails.append(Mails.accountLocked(to: email, minutes: Int(policy.lockSeconds / 60)))
                }
            }
            return mails
        }
        await send(mails, logger: logger)
    }

    // MARK: - Sessions

    /// The session and its user for one token hash (bind: `SecretHasher.tokenHash(token)`); ``session(row:now:logger:)``
    /// turns its row into a live session. Other statements may embed it as a derived table (its user column is `id`).
    public static let sessionQuery = "SELECT \(sessionColumns) FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.token_hash = ?"

    /// ``sessionQuery`` with only what ``checkSession(row:logger:)`` reads (and the selected profile), for statements
    /// that check the session but do not need it or its user (the entitlement snapshot).
    public static let checkedSessionQuery =
        "SELECT \(checkedSessionColumns) FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.token_hash = ?"

    /// ``checkedSessionQuery`` for several tokens at once (PostgreSQL): bind the token hashes joined by commas; each row
    /// also carries its `token_hash`.
    public static let checkedSessionsQuery = """
        SELECT s.token_hash, \(checkedSessionColumns) FROM unnest(string_to_array(?, ',')) AS h(token_hash)
        JOIN sessions s ON s.token_hash = h.token_hash JOIN users u ON u.id = s.user_id
        """

    static let checkedSessionColumns =
        "s.id AS session_id, s.last_used_at_ms, s.expires_at_ms, s.revoked_at_ms, s.selected_profile_id, u.id, u.deleted_at_ms"

    static let sessionColumns = """
        \(checkedSessionColumns), s.created_at_ms, s.authenticated_at_ms, u.email, u.name, u.email_verified, u.role,
        u.prompt_enhancement_enabled
        """

    /// The bind of ``sessionQuery`` for a bearer token; an empty or oversized token is refused before any query.
    public static func sessionTokenHash(_ token: String) throws -> String {
        guard !token.isEmpty, token.utf8.count <= 256 else { throw AuthError.unauthorized }
        return SecretHasher.tokenHash(token)
    }

    /// Finds the live session for a bearer token; slides its idle expiry (written at most once a minute).
    public func authenticate(token: String, logger: Logger) async throws -> AuthenticatedSession {
        let hash = try Self.sessionTokenHash(token)
        let row = try await database.quickQuery(Self.sessionQuery, [hash], logger: logger).first
        return try await session(row: row, logger: logger)
    }

    /// The live session in a row of ``sessionQuery`` (nil: no such token): revoked, expired, idle or deleted → 401.
    /// Slides the idle expiry when the last write is older than the touch interval.
    public func session(row: SQLRow?, logger: Logger) async throws -> AuthenticatedSession {
        let (row, usedAt) = try await checkSession(row: row, logger: logger)
        return AuthenticatedSession(
            sessionID: try row.string("session_id"), user: try User(row: row), createdAt: try row.date("created_at_ms"), lastUsedAt: usedAt,
            expiresAt: min(try row.date("expires_at_ms"), usedAt.addingTimeInterval(policy.sessionIdleSeconds)),
            authenticatedAt: try row.date("authenticated_at_ms"), selectedProfileID: row.optionalString("selected_profile_id"))
    }

    /// The checks of ``session(row:logger:)`` alone, on a row of ``sessionQuery`` or ``checkedSessionQuery``: 401 unless
    /// the session is live; slides its idle expiry the same way. Returns the row and when the session was last used.
    @discardableResult
    public func checkSession(row: SQLRow?, logger: Logger) async throws -> (row: SQLRow, lastUsedAt: Date) {
        let now = clock.now()
        guard let row, row.optionalInt("revoked_at_ms") == nil, row.optionalInt("deleted_at_ms") == nil else { throw AuthError.unauthorized }
        let lastUsed = try row.date("last_used_at_ms")
        guard now < (try row.date("expires_at_ms")), now < lastUsed.addingTimeInterval(policy.sessionIdleSeconds) else { throw AuthError.unauthorized }
        guard now.timeIntervalSince(lastUsed) >= policy.sessionTouchIntervalSeconds else { return (row, lastUsed) }
        let sessionID = try row.string("session_id")
        try await database.transaction(logger: logger) { tx in
            try await tx.query("UPDATE sessions SET last_used_at_ms = ? WHERE id = ? AND revoked_at_ms IS NULL", [now, sessionID])
        }
        return (row, now)
    }

    public func listSessions(of session: AuthenticatedSession, logger: Logger) async throws -> [SessionSummary] {
        let now = clock.now()
        let rows = try await database.withConnection(logger: logger) { tx in
            try await tx.query(
                """
                SELECT id, created_at_ms, last_used_at_ms, expires_at_ms, user_agent, ip FROM sessions
                WHERE user_id = ? AND revoked_at_ms IS NULL AND expires_at_ms > ? AND last_used_at_ms > ?
                ORDER BY last_used_at_ms DESC LIMIT 200
                """, [session.user.id, now, now.addingTimeInterval(-policy.sessionIdleSeconds)])
        }
        return try rows.map { row in
            let lastUsed = try row.date("last_used_at_ms")
            return SessionSummary(
                id: try row.string("id"), createdAt: try row.date("created_at_ms"), lastUsedAt: lastUsed,
                expiresAt: min(try row.date("expires_at_ms"), lastUsed.addingTimeInterval(policy.sessionIdleSeconds)),
                userAgent: row.optionalString("user_agent"), ip: row.optionalString("ip"), current: try row.string("id") == session.sessionID)
        }
    }

    /// Revokes one of the caller's sessions; another account's session id is "not found".
    public func revokeSession(id: String, of session: AuthenticatedSession, client: ClientInfo, logger: Logger) async throws {
        let revoked = try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            let rows = try await tx.query(
                "UPDATE sessions SET revoked_at_ms = ? WHERE id = ? AND user_id = ? AND revoked_at_ms IS NULL RETURNING id",
                [now, id, session.user.id])
            if !rows.isEmpty {
                try await AuditLog.record(tx, at: now, actor: session.user.id, action: "session_revoked", subject: session.user.id, ip: client.ip)
            }
            return !rows.isEmpty
        }
        guard revoked else { throw AuthError.notFound }
    }

    public func signOut(_ session: AuthenticatedSession, client: ClientInfo, logger: Logger) async throws {
        try await revokeSession(id: session.sessionID, of: session, client: client, logger: logger)
    }

    // MARK: - Passwords

    /// Mails a reset code to a verified account; unknown addresses get the same answer and no mail.
    public func forgotPassword(email rawEmail: String, client: ClientInfo, logger: Logger) async throws {
        guard let email = InputRules.normalizedEmail(rawEmail) else { throw AuthError.validation("Enter a valid email address.") }
        let mails: [MailMessage] = try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            let budget = try await takeMailBudget(tx, email: email, now: now)
            let user = try await tx.first("SELECT id, email_verified FROM users WHERE email = ? AND deleted_at_ms IS NULL", [email])
            guard case .allowed = budget, let user, try user.bool("email_verified") else { return [] }
            let code = try await issueCode(tx, email: email, purpose: .reset, now: now)
            try await AuditLog.record(tx, at: now, actor: "anonymous", action: "password_reset_requested", subject: try user.string("id"), ip: client.ip)
            return [Mails.resetCode(to: email, code: code, minutes: Int(policy.codeLifetimeSeconds / 60))]
        }
        await send(mails, logger: logger)
    }

    /// Sets a new password with a reset code: revokes every session and lifts a sign-in lock.
    public func resetPassword(email rawEmail: String, code: String, newPassword: String, client: ClientInfo, logger: Logger) async throws {
        guard let email = InputRules.normalizedEmail(rawEmail) else { throw AuthError.validation("Enter a valid email address.") }
        try Self.checkCodeFormat(code)
        if let problem = InputRules.passwordProblem(newPassword) { throw AuthError.validation(problem) }
        let newHash = try await hashPassword(newPassword)
        let accountKey = "acct:" + secrets.addressKey(email)
        let outcome: Result<[MailMessage], AuthError> = try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            let check = try await consumeCode(tx, email: email, purpose: .reset, code: code, now: now)
            guard case .ok = check else { return .failure(check.error) }
            guard let user = try await tx.first("SELECT id FROM users WHERE email = ? AND deleted_at_ms IS NULL", [email]) else {
                return .failure(.invalidOTP(attemptsRemaining: 0))
            }
            let userID = try user.string("id")
            try await tx.query("UPDATE users SET password_hash = ?, updated_at_ms = ? WHERE id = ?", [newHash, now, userID])
            try await tx.query("UPDATE sessions SET revoked_at_ms = ? WHERE user_id = ? AND revoked_at_ms IS NULL", [now, userID])
            try await tx.query("DELETE FROM sign_in_throttles WHERE throttle_key = ?", [accountKey])
            try await AuditLog.record(tx, at: now, actor: userID, action: "password_reset", subject: userID, ip: client.ip)
            return .success([Mails.passwordChanged(to: email)])
        }
        await send(try outcome.get(), logger: logger)
    }

    /// Changes the password after checking the current one; every other session is revoked.
    public func changePassword(
        _ session: AuthenticatedSession, currentPassword: String, newPassword: String, client: ClientInfo, logger: Logger
    ) async throws {
        if let problem = InputRules.passwordProblem(newPassword) { throw AuthError.validation(problem) }
        try await requirePassword(currentPassword, userID: session.user.id, logger: logger)
        let newHash = try await hashPassword(newPassword)
        try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            try await tx.query("UPDATE users SET password_hash = ?, updated_at_ms = ? WHERE id = ?", [newHash, now, session.user.id])
            try await tx.query(
                "UPDATE sessions SET revoked_at_ms = ? WHERE user_id = ? AND id <> ? AND revoked_at_ms IS NULL", [now, session.user.id, session.sessionID])
            try await tx.query("UPDATE sessions SET authenticated_at_ms = ? WHERE id = ?", [now, session.sessionID])
            try await AuditLog.record(tx, at: now, actor: session.user.id, action: "password_changed", subject: session.user.id, ip: client.ip)
        }
        await send([Mails.passwordChanged(to: session.user.email)], logger: logger)
    }

    /// Throws `invalidCredentials` unless `password` is the user's current password.
    public func requirePassword(_ password: String, userID: String, logger: Logger) async throws {
        let stored = try await database.withConnection(logger: logger) { tx in
            try await tx.first("SELECT password_hash FROM users WHERE id = ?", [userID])?.optionalString("password_hash")
        }
        guard let stored, try await hasher.verify(password, encoded: stored) else { throw AuthError.invalidCredentials }
    }

    // MARK: - The account

    public func updateMe(_ session: AuthenticatedSession, name: String?, promptEnhancementEnabled: Bool?, logger: Logger) async throws -> User {
        if let name, let problem = InputRules.nameProblem(name) { throw AuthError.validation(problem) }
        return try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            if let name {
                try await tx.query(
                    "UPDATE users SET name = ?, updated_at_ms = ? WHERE id = ?", [name.trimmingCharacters(in: .whitespacesAndNewlines), now, session.user.id])
            }
            if let promptEnhancementEnabled {
                try await tx.query(
                    "UPDATE users SET prompt_enhancement_enabled = ?, updated_at_ms = ? WHERE id = ?", [promptEnhancementEnabled, now, session.user.id])
            }
            return try await loadUser(tx, id: session.user.id)
        }
    }

    /// Erases the account's personal data (email, name, hashes, profiles, devices) and revokes every session.
    /// The user id stays, anonymous, so ledger history keeps balancing.
    public func deleteMe(_ session: AuthenticatedSession, password: String, client: ClientInfo, logger: Logger) async throws {
        try await requirePassword(password, userID: session.user.id, logger: logger)
        let email = session.user.email
        try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            let id = session.user.id
            try await tx.query(
                "UPDATE users SET email = NULL, name = 'Deleted user', password_hash = NULL, deleted_at_ms = ?, updated_at_ms = ? WHERE id = ?",
                [now, now, id])
            try await tx.query("UPDATE sessions SET revoked_at_ms = ? WHERE user_id = ? AND revoked_at_ms IS NULL", [now, id])
            try await tx.query("UPDATE sessions SET user_agent = NULL, ip = NULL WHERE user_id = ?", [id])
            try await tx.query("DELETE FROM family_profiles WHERE user_id = ?", [id])
            try await tx.query("DELETE FROM known_devices WHERE user_id = ?", [id])
            try await tx.query("DELETE FROM otp_codes WHERE email = ?", [email])
            try await AuditLog.record(tx, at: now, actor: id, action: "account_deleted", subject: id, ip: client.ip)
        }
    }

    /// Creates a verified operator account (CLI `admin create`).
    public func createAdmin(email rawEmail: String, password: String, name: String, logger: Logger) async throws -> User {
        guard let email = InputRules.normalizedEmail(rawEmail) else { throw AuthError.validation("Enter a valid email address.") }
        if let problem = InputRules.passwordProblem(password) { throw AuthError.validation(problem) }
        if let problem = InputRules.nameProblem(name) { throw AuthError.validation(problem) }
        let hash = try await hashPassword(password)
        do {
            return try await database.transaction(logger: logger) { tx in
                let now = clock.now()
                let id = UUID().uuidString.lowercased()
                try await tx.query(
                    """
                    INSERT INTO users (id, email, name, password_hash, email_verified, role, prompt_enhancement_enabled, created_at_ms, updated_at_ms)
                    VALUES (?, ?, ?, ?, ?, 'admin', ?, ?, ?)
                    """, [id, email, name, hash, true, true, now, now])
                _ = try await ensureDefaultProfile(tx, userID: id, name: name, now: now)
                try await AuditLog.record(tx, at: now, actor: "cli", action: "admin_created", subject: id, ip: nil)
                return try await loadUser(tx, id: id)
            }
        } catch StorageError.uniqueViolation {
            throw AuthError.conflict("An account with this email already exists.")
        }
    }

    public func user(id: String, logger: Logger) async throws -> User {
        try await database.withConnection(logger: logger) { tx in try await loadUser(tx, id: id) }
    }

    /// The selected profile, or the default one when none is selected (or the selected one is gone): one query.
    public func activeProfile(selectedID: String?, userID: String, logger: Logger) async throws -> FamilyProfile? {
        try await database.withConnection(logger: logger) { tx in
            try await tx.first(
                """
                SELECT \(FamilyProfile.columns) FROM family_profiles WHERE user_id = ? AND (is_default OR id = ?)
                ORDER BY CASE WHEN id = ? THEN 0 ELSE 1 END LIMIT 1
                """, [userID, selectedID ?? "", selectedID ?? ""]).map(FamilyProfile.init)
        }
    }

    public func profile(id: String, userID: String, logger: Logger) async throws -> FamilyProfile? {
        try await database.withConnection(logger: logger) { tx in
            try await tx.first("SELECT \(FamilyProfile.columns) FROM family_profiles WHERE id = ? AND user_id = ?", [id, userID]).map(FamilyProfile.init)
        }
    }

    // MARK: - Helpers

    func hashPassword(_ password: String) async throws -> String {
        do { return try await hasher.hash(password) } catch PasswordHasherError.overloaded { throw AuthError.overloaded }
    }

    func loadUser(_ tx: any SQLExecutor, id: String) async throws -> User {
        guard let row = try await tx.first("SELECT \(User.columns) FROM users WHERE id = ?", [id]) else { throw AuthError.notFound }
        return try User(row: row)
    }

    func createSession(_ tx: any SQLExecutor, userID: String, profileID: String?, client: ClientInfo, now: Date) async throws -> IssuedSession {
        let token = SecretHasher.newSessionToken()
        let id = UUID().uuidString.lowercased()
        let absolute = now.addingTimeInterval(policy.sessionAbsoluteSeconds)
        try await tx.query(
            """
            INSERT INTO sessions (id, user_id, token_hash, created_at_ms, last_used_at_ms, expires_at_ms, authenticated_at_ms, user_agent, ip,
                                  selected_profile_id)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, [id, userID, SecretHasher.tokenHash(token), now, now, absolute, now, client.userAgent, client.ip, profileID])
        return IssuedSession(id: id, token: token, expiresAt: min(absolute, now.addingTimeInterval(policy.sessionIdleSeconds)))
    }

    /// Records the device; true when it was not known before (and the account already had one).
    func rememberDevice(_ tx: any SQLExecutor, userID: String, client: ClientInfo, now: Date) async throws -> Bool {
        let fingerprint = SecretHasher.tokenHash("\(client.userAgent ?? "")|\(client.ipFamily)")
        let hadAny = try await tx.first("SELECT fingerprint FROM known_devices WHERE user_id = ? LIMIT 1", [userID]) != nil
        let inserted = try await tx.query(
            "INSERT INTO known_devices (user_id, fingerprint, first_seen_at_ms) VALUES (?, ?, ?) ON CONFLICT (user_id, fingerprint) DO NOTHING RETURNING user_id",
            [userID, fingerprint, now])
        return hadAny && !inserted.isEmpty
    }

    func ensureDefaultProfile(_ tx: any SQLExecutor, userID: String, name: String, now: Date) async throws -> String {
        if let existing = try await tx.first("SELECT id FROM family_profiles WHERE user_id = ? AND is_default", [userID]) {
            return try existing.string("id")
        }
        let id = UUID().uuidString.lowercased()
        try await tx.query(
            """
            INSERT INTO family_profiles (id, user_id, name, avatar, is_default, can_make_purchases, can_use_custom_content_types, created_at_ms, updated_at_ms)
            VALUES (?, ?, ?, NULL, ?, ?, ?, ?, ?)
            """, [id, userID, String(name.prefix(30)), true, true, true, now, now])
        return id
    }

    static func checkCodeFormat(_ code: String) throws {
        guard code.count == 6, code.allSatisfy({ $0.isASCII && $0.isNumber }) else { throw AuthError.validation("The code is 6 digits.") }
    }

    func send(_ mails: [MailMessage], logger: Logger) async {
        for mail in mails {
            do { try await mailer.send(mail, logger: logger) } catch {
                // The account change is committed; the user can ask for another code. Never log the body.
                logger.error("mail delivery failed", metadata: ["subject": "\(mail.subject)", "error": "\(error)"])
            }
        }
    }
}

/// A user as operators see it.
public struct UserSummary: Sendable, Equatable {
    public let user: User
    public let createdAt: Date
    public let deleted: Bool
}

extension AuthService {
    /// Operator lookup: the user with exactly this address, or the newest users (at most `limit`, ≤ 100).
    public func findUsers(email: String?, limit: Int, logger: Logger) async throws -> [UserSummary] {
        let limit = min(max(limit, 1), 100)
        let rows = try await database.withConnection(logger: logger) { tx in
            if let email {
                guard let normalized = InputRules.normalizedEmail(email) else { throw AuthError.validation("Enter a valid email address.") }
                return try await tx.query("SELECT \(User.columns), created_at_ms, deleted_at_ms FROM users WHERE email = ?", [normalized])
            }
            return try await tx.query("SELECT \(User.columns), created_at_ms, deleted_at_ms FROM users ORDER BY created_at_ms DESC, id LIMIT ?", [limit])
        }
        return try rows.map { UserSummary(user: try User(row: $0), createdAt: try $0.date("created_at_ms"), deleted: $0.optionalInt("deleted_at_ms") != nil) }
    }

    /// Operator lookup by id (deleted users included, anonymous).
    public func findUser(id: String, logger: Logger) async throws -> UserSummary {
        let row = try await database.withConnection(logger: logger) { tx in
            try await tx.first("SELECT \(User.columns), created_at_ms, deleted_at_ms FROM users WHERE id = ?", [id])
        }
        guard let row else { throw AuthError.notFound }
        return UserSummary(user: try User(row: row), createdAt: try row.date("created_at_ms"), deleted: row.optionalInt("deleted_at_ms") != nil)
    }
}
