import Foundation
import Logging
import Storage

extension AuthService {
    /// Starts a sign-up and mails a code that activates exactly the password given here.
    ///
    /// Every answer is the same, whatever the address: a verified owner gets a notice instead of a code; a pending sign-up
    /// younger than ``AuthPolicy/pendingSignUpSeconds`` keeps its password and name, and the repeat only re-sends a code
    /// for it (like resend-otp); a sign-up that mails nothing (cooldown, hourly budget) changes nothing.
    public func signUp(email rawEmail: String, password: String, name rawName: String, client: ClientInfo, logger: Logger) async throws {
        guard let email = InputRules.normalizedEmail(rawEmail) else { throw AuthError.validation("Enter a valid email address.") }
        if let problem = InputRules.passwordProblem(password) { throw AuthError.validation(problem) }
        if let problem = InputRules.nameProblem(rawName) { throw AuthError.validation(problem) }
        let name = rawName.trimmingCharacters(in: .whitespacesAndNewlines)
        try await reserveHashing(ip: client.ip, logger: logger)
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

    private func signUpTransaction(
        _ tx: any SQLExecutor, email: String, name: String, passwordHash: String, client: ClientInfo
    ) async throws
        -> [MailMessage]
    {
        let now = clock.now()
        let existing = try await tx.first(
            "SELECT id, email_verified, COALESCE(signed_up_at_ms, updated_at_ms) AS signed_up_at_ms FROM users WHERE email = ? AND deleted_at_ms IS NULL"
                + tx.dialect.forUpdate, [email])
        if let existing, try existing.bool("email_verified") {
            try await AuditLog.record(tx, at: now, actor: "anonymous", action: "sign_up_existing", subject: try existing.string("id"), ip: client.ip)
            guard case .allowed = try await takeMailBudget(tx, .notice, email: email, now: now) else { return [] }
            return [Mails.existingAccount(to: email)]
        }
        guard case .allowed = try await takeMailBudget(tx, .verification, email: email, now: now) else { return [] }
        if let existing {
            let id = try existing.string("id")
            if try existing.date("signed_up_at_ms") > now.addingTimeInterval(-policy.pendingSignUpSeconds) {
                try await AuditLog.record(tx, at: now, actor: "anonymous", action: "sign_up_repeated", subject: id, ip: client.ip)
            } else {
                try await tx.query(
                    "UPDATE users SET name = ?, password_hash = ?, signed_up_at_ms = ?, updated_at_ms = ? WHERE id = ?",
                    [name, passwordHash, now, now, id])
                try await AuditLog.record(tx, at: now, actor: "anonymous", action: "sign_up_restarted", subject: id, ip: client.ip)
            }
        } else {
            let id = UUID().uuidString.lowercased()
            try await tx.query(
                """
                INSERT INTO users (id, email, name, password_hash, email_verified, role, prompt_enhancement_enabled, created_at_ms, updated_at_ms,
                                   signed_up_at_ms)
                VALUES (?, ?, ?, ?, ?, 'user', ?, ?, ?, ?)
                """, [id, email, name, passwordHash, false, true, now, now, now])
            try await emitUserEvent(tx, "user.created", userID: id, email: email, now: now, ["emailVerified": .bool(false), "role": .string("user")])
        }
        try await resetCodeAttempts(tx, .verify, email: email)
        let code = try await issueCode(tx, email: email, purpose: .verify, now: now)
        return [Mails.verificationCode(to: email, code: code, minutes: Int(policy.codeLifetimeSeconds / 60))]
    }

    /// The result of a successful verification.
    public struct Verification: Sendable {
        public let user: User
        public let session: IssuedSession
        public let welcomeTokens: Int
    }

    /// Checks a sign-up code; on success verifies the address, creates the default profile, grants the welcome tokens once
    /// and opens a session. The code attempt is reserved first, for every address alike.
    public func verifyEmail(email rawEmail: String, code: String, client: ClientInfo, logger: Logger) async throws -> Verification {
        guard let email = InputRules.normalizedEmail(rawEmail) else { throw AuthError.validation("Enter a valid email address.") }
        try Self.checkCodeFormat(code)
        let attempt = try await reserveCodeAttempt(.verify, email: email, logger: logger)
        let outcome: Result<Verification, AuthError> = try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            let check = try await checkCode(tx, email: email, purpose: .verify, code: code, attempt: attempt, consume: true, now: now)
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
            try await emitUserEvent(tx, "user.verified", userID: userID, email: email, now: now, ["welcomeTokens": .int(Int64(granted))])
            let user = try await loadUser(tx, id: userID)
            return .success(Verification(user: user, session: session, welcomeTokens: granted))
        }
        return try outcome.get()
    }

    /// Mails a fresh sign-up code (for the pending sign-up's password) within the verification mail budget. The budget is
    /// taken for every address asked about, so the answers do not reveal which ones exist.
    public func resendCode(email rawEmail: String, logger: Logger) async throws {
        guard let email = InputRules.normalizedEmail(rawEmail) else { throw AuthError.validation("Enter a valid email address.") }
        let mails: [MailMessage] = try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            let user = try await startCodeMail(tx, .verify, email: email, now: now)
            guard let user, try !user.bool("email_verified") else { return [] }
            let code = try await issueCode(tx, email: email, purpose: .verify, now: now)
            return [Mails.verificationCode(to: email, code: code, minutes: Int(policy.codeLifetimeSeconds / 60))]
        }
        await send(mails, logger: logger)
    }
}
