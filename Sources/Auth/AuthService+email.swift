import Clock
import Foundation
import Logging
import Mail
import Storage

extension AuthService {
    /// Starts an email change (owner profile only): the current password is checked against the address's password
    /// budget (an account without one needs a sign-in within 10 minutes), then a code goes to the new address and a notice
    /// to the current one. The answer is the same whether or not the new address is taken; the switch fails at
    /// verification then.
    public func requestEmailChange(
        _ session: AuthenticatedSession, newEmail rawEmail: String, currentPassword: String, client: ClientInfo, logger: Logger
    ) async throws {
        try requireOwnerProfile(session)
        guard rawEmail.utf8.count <= InputRules.emailBytesMax, let newEmail = InputRules.normalizedEmail(rawEmail) else {
            throw AuthError.validation("Field 'newEmail' must be a valid email address.")
        }
        guard newEmail != session.user.email else { throw AuthError.validation("Field 'newEmail' is already the account's address.") }
        try await requirePresence(session, password: currentPassword, client: client, logger: logger)
        let mails: [MailMessage] = try await sessionTransaction(session, logger: logger) { tx in
            let now = clock.now()
            if case .throttled(let seconds) = try await takeMailBudget(tx, .verification, email: newEmail, now: now) {
                throw AuthError.rateLimited(
                    retryAfterSeconds: seconds, detail: "Too many codes requested for this address; wait before asking again.")
            }
            let code = SecretHasher.newCode()
            try await tx.query(
                """
                INSERT INTO email_changes (user_id, session_id, new_email, code_hmac, expires_at_ms, created_at_ms) VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT (user_id) DO UPDATE SET session_id = excluded.session_id, new_email = excluded.new_email,
                    code_hmac = excluded.code_hmac, expires_at_ms = excluded.expires_at_ms, created_at_ms = excluded.created_at_ms
                """,
                [
                    session.user.id, session.sessionID, newEmail,
                    secrets.codeHMAC(code: code, email: newEmail, purpose: "email_change:" + session.user.id),
                    now.addingTimeInterval(policy.codeLifetimeSeconds), now,
                ])
            try await AttemptBudget.clear(tx, key: keys.code(.emailChange, email: "user:" + session.user.id))
            try await AuditLog.record(tx, at: now, actor: session.user.id, action: "email_change_requested", subject: session.user.id, ip: client.ip)
            // The notice to the current address always goes (no notice cooldown: a new-device notice a minute earlier must
            // not hide it); the request itself is limited by the password budget and the new address's code budget.
            return [
                Mails.emailChangeCode(to: newEmail, code: code, minutes: Int(policy.codeLifetimeSeconds / 60)),
                Mails.emailChangeRequested(to: session.user.email),
            ]
        }
        await send(mails, logger: logger)
    }

    /// Switches the address with the code mailed to the new one (five tries per code; only the session that asked for
    /// the change, still live), marks it verified, signs out every other session, audits it and tells the old address. A taken address is 409 `email_taken` (only the signed-in owner
    /// who holds the code learns it).
    public func confirmEmailChange(_ session: AuthenticatedSession, code: String, client: ClientInfo, logger: Logger) async throws -> User {
        try requireOwnerProfile(session)
        try Self.checkCodeFormat(code)
        let key = keys.code(.emailChange, email: "user:" + session.user.id)
        let rule = policy.codeRule
        let attempt: Int
        switch try await database.transaction(
            lane: key, logger: logger, { try await AttemptBudget.reserve($0, key: key, rule: rule, now: clock.now()) })
        {
        case .reserved(let number): attempt = number
        case .refused(let seconds, _): throw AuthError.tooManyAttempts(retryAfterSeconds: seconds)
        }
        let outcome: Result<(User, String), AuthError>
        do {
            outcome = try await changeEmail(session, code: code, key: key, attempt: attempt, client: client, logger: logger)
        } catch StorageError.uniqueViolation {
            // Another account took the address between the check and the write (two changes to one address at once).
            throw AuthError.conflict("Another account uses this address; the address was not changed.")
        }
        let (user, _) = try outcome.get()
        await send([Mails.emailChanged(to: session.user.email, newEmail: user.email)], logger: logger)
        return user
    }

    /// The change itself, in one transaction (``confirmEmailChange(_:code:client:logger:)``).
    func changeEmail(
        _ session: AuthenticatedSession, code: String, key: String, attempt: Int, client: ClientInfo, logger: Logger
    ) async throws -> Result<(User, String), AuthError> {
        try await sessionTransaction(session, logger: logger) { tx in
            let now = clock.now()
            // Only the session that asked can finish the change (it chose the address the code went to).
            guard
                let row = try await tx.first(
                    "SELECT * FROM email_changes WHERE user_id = ? AND session_id = ?" + tx.dialect.forUpdate, [session.user.id, session.sessionID]),
                let stored = row.optionalString("code_hmac")
            else { return .failure(.invalidOTP(attemptsRemaining: max(0, policy.codeWrongAttemptsMax - attempt))) }
            let newEmail = try row.string("new_email")
            guard SecretHasher.constantTimeEqual(stored, secrets.codeHMAC(code: code, email: newEmail, purpose: "email_change:" + session.user.id))
            else {
                if attempt >= policy.codeWrongAttemptsMax { try await tx.query("DELETE FROM email_changes WHERE user_id = ?", [session.user.id]) }
                return .failure(.invalidOTP(attemptsRemaining: max(0, policy.codeWrongAttemptsMax - attempt)))
            }
            guard try row.date("expires_at_ms") > now else { return .failure(.otpExpired) }
            try await tx.query("DELETE FROM email_changes WHERE user_id = ?", [session.user.id])
            // Only a verified account holds an address: a pending sign-up at it (anyone can start one) is released.
            if try await releasePendingAccount(tx, email: newEmail, now: now) {
                return .failure(.conflict("Another account uses \(newEmail); the address was not changed."))
            }
            try await users.setEmail(tx, id: session.user.id, newEmail, now: now)
            try await signOutEverywhere(tx, userID: session.user.id, except: session.sessionID, now: now)
            try await AttemptBudget.clear(tx, key: key)
            try await AuditLog.record(tx, at: now, actor: session.user.id, action: "email_changed", subject: session.user.id, ip: client.ip)
            return .success((try await loadUser(tx, id: session.user.id), newEmail))
        }
    }
}
