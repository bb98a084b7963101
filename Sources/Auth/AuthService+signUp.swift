import Clock
import Events
import Foundation
import Logging
import Mail
import Storage

extension AuthService {
    /// Starts a sign-up: this request's password and name wait in a sign-up request of their own, with a code mailed for
    /// it alone (docs/security.md, "Mailbox proof").
    ///
    /// Every answer is the same, whatever the address, and every address takes the same budgets (one Argon2 run for the
    /// IP, one verification mail for the address): a verified owner gets a notice instead of a code; a pending address
    /// gets another request beside the earlier ones. A sign-up whose mail the budget holds back (cooldown, hourly budget)
    /// answers 429 with `Retry-After`, for every address alike, so nobody waits for a code that is not coming (and takes
    /// one that somebody else's sign-up caused for theirs); it is still stored, without a code, so resend-otp sees that
    /// the address has more than one sign-up and mints a code for none of them.
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
                let (mails, heldSeconds) = try await database.transaction(lane: BudgetKeys.address(email), logger: logger) { tx in
                    try await self.signUpTransaction(tx, email: email, name: name, passwordHash: passwordHash, client: client)
                }
                if let heldSeconds {
                    throw AuthError.rateLimited(
                        retryAfterSeconds: heldSeconds, detail: "Too many codes requested for this address; wait before asking again.")
                }
                await send(mails, logger: logger)
                return
            } catch StorageError.uniqueViolation where attempt < 3 {
                continue  // a concurrent sign-up for the same address created the row first: take the existing-account path
            }
        }
    }

    /// The mails to send, or how long the address's mail budget holds them back (the request is stored either way).
    private func signUpTransaction(
        _ tx: any SQLExecutor, email: String, name: String, passwordHash: String, client: ClientInfo
    ) async throws -> (mails: [MailMessage], heldSeconds: Int?) {
        let now = clock.now()
        let existing = try await users.holder(tx, email: email, lock: true)
        var heldSeconds: Int?
        if case .throttled(let seconds) = try await takeMailBudget(tx, .verification, email: email, now: now) { heldSeconds = seconds }
        let mailed = heldSeconds == nil
        if let existing, existing.emailVerified {
            guard mailed else { return ([], heldSeconds) }
            try await AuditLog.record(tx, at: now, actor: "anonymous", action: "sign_up_existing", subject: existing.id, ip: client.ip)
            return ([Mails.existingAccount(to: email)], nil)
        }
        let userID: String
        if let existing {
            userID = existing.id
        } else {
            // The pending account holds no password: only a verified request's password is ever copied onto it.
            userID = FreshID.uuid()
            try await users.insert(tx, id: userID, email: email, name: name, passwordHash: nil, verified: false, role: "user", now: now)
            try await emitUserEvent(
                tx, "user.created", userID: userID, email: email, now: now, ["emailVerified": .bool(false), "role": .string("user")])
        }
        try await tx.query(
            "DELETE FROM sign_up_requests WHERE email = ? AND created_at_ms < ?", [email, now.addingTimeInterval(-policy.pendingSignUpSeconds)])
        // At most `pendingSignUpRequestsMax` live requests per address: the oldest make room, but a request whose code
        // was mailed and still works goes last. Otherwise sign-ups the mail budget holds back (stored without a code, and
        // cheap for anyone to send) would push out the one whose code the owner is about to type; the mail budget keeps
        // the requests with a working code far fewer than the cap.
        try await tx.query(
            """
            DELETE FROM sign_up_requests WHERE email = ? AND consumed_at_ms IS NULL AND id NOT IN (
                SELECT id FROM sign_up_requests WHERE email = ? AND consumed_at_ms IS NULL
                ORDER BY CASE WHEN (code_hmac IS NOT NULL OR link_hmac IS NOT NULL) AND expires_at_ms > ? THEN 0 ELSE 1 END, created_at_ms DESC, id DESC LIMIT ?)
            """, [email, email, now, policy.pendingSignUpRequestsMax - 1])
        let code = MailedCode.new()
        let hmacs = mailed ? code.hmacs(secrets, email: email, purpose: .verify) : nil
        try await tx.query(
            """
            INSERT INTO sign_up_requests (id, email, name, password_hash, code_hmac, link_hmac, created_at_ms, expires_at_ms, consumed_at_ms)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL)
            """,
            [FreshID.uuid(), email, name, passwordHash, hmacs?.short, hmacs?.long, now, now.addingTimeInterval(policy.codeLifetimeSeconds)])
        try await AuditLog.record(tx, at: now, actor: "anonymous", action: "sign_up_requested", subject: userID, ip: client.ip)
        guard mailed else { return ([], heldSeconds) }
        try await resetCodeAttempts(tx, .verify, email: email)
        return ([Mails.verificationCode(to: email, code: code, minutes: Int(policy.codeLifetimeSeconds / 60), requestedAt: now)], nil)
    }

    /// The result of a successful verification.
    public struct Verification: Sendable {
        public let user: User
        public let session: IssuedSession
        public let welcomeTokens: Int
    }

    /// Checks a sign-up code; on success the account takes the password and name of the sign-up request the code was
    /// mailed for (every other request for the address dies), is verified, gets its default profile and the welcome
    /// tokens once, and a session opens. The code attempt is reserved first, for every address alike.
    public func verifyEmail(email rawEmail: String, code: String, client: ClientInfo, logger: Logger) async throws -> Verification {
        guard let email = InputRules.normalizedEmail(rawEmail) else { throw AuthError.validation("Enter a valid email address.") }
        let code = try TypedCode(code)
        let attempt = try await reserveCheck(code, .verify, email: email, logger: logger)
        let outcome: Result<Verification, AuthError> = try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            let (check, found) = try await checkSignUpCode(tx, email: email, code: code, attempt: attempt, now: now)
            guard case .ok = check, let request = found else { return .failure(check.error) }
            guard let holder = try await users.holder(tx, email: email), !holder.emailVerified else {
                return .failure(.invalidOTP(attemptsRemaining: 0))
            }
            let userID = holder.id
            let name = try request.string("name")
            try await users.verify(tx, id: userID, name: name, passwordHash: try request.string("password_hash"), now: now)
            try await tx.query("UPDATE sign_up_requests SET consumed_at_ms = ? WHERE id = ?", [now, try request.string("id")])
            try await tx.query("DELETE FROM sign_up_requests WHERE email = ? AND consumed_at_ms IS NULL", [email])
            try await resetCodeAttempts(tx, .verify, email: email)
            let profileID = try await ensureDefaultProfile(tx, userID: userID, name: name, now: now)
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

    /// The sign-up request whose code this is (locked), or why not. A wrong short code at the last attempt burns every
    /// live short code of the address (their long codes keep working). Only the holder of a right code learns `used` or
    /// `expired`.
    private func checkSignUpCode(_ tx: any SQLExecutor, email: String, code: TypedCode, attempt: Int, now: Date) async throws -> (CodeCheck, SQLRow?)
    {
        let candidate = code.hmac(secrets, email: email, purpose: .verify)
        guard
            let row = try await tx.first(
                "SELECT id, name, password_hash, expires_at_ms, consumed_at_ms FROM sign_up_requests WHERE email = ? AND \(code.column) = ?"
                    + " ORDER BY created_at_ms DESC LIMIT 1" + tx.dialect.forUpdate, [email, candidate])
        else {
            guard attempt >= policy.codeWrongAttemptsMax else { return (.wrong(attemptsRemaining: policy.codeWrongAttemptsMax - attempt), nil) }
            try await tx.query("UPDATE sign_up_requests SET code_hmac = NULL WHERE email = ? AND consumed_at_ms IS NULL", [email])
            return (.burned, nil)
        }
        if row.optionalInt("consumed_at_ms") != nil { return (.used, nil) }
        if try row.date("expires_at_ms") <= now { return (.expired, nil) }
        return (.ok, row)
    }

    /// Mails a fresh code for the pending sign-up request of the address when it has exactly one (the mail says when it
    /// was started); with several, nobody can say whose the caller is, so none gets a code and the owner signs up again.
    /// Within the verification mail budget. The budget is taken and the same
    /// statements run for every address asked about, so neither the answer nor its work reveals which ones exist.
    public func resendCode(email rawEmail: String, logger: Logger) async throws {
        guard let email = InputRules.normalizedEmail(rawEmail) else { throw AuthError.validation("Enter a valid email address.") }
        let mails: [MailMessage] = try await database.transaction(lane: BudgetKeys.address(email), logger: logger) { tx in
            let now = clock.now()
            _ = try await startCodeMail(tx, .verify, email: email, now: now)
            let code = MailedCode.new()
            let hmacs = code.hmacs(secrets, email: email, purpose: .verify)
            let renewed = try await tx.query(
                """
                UPDATE sign_up_requests SET code_hmac = ?, link_hmac = ?, expires_at_ms = ?
                WHERE id = (SELECT r.id FROM sign_up_requests r JOIN users u ON u.email = r.email AND u.deleted_at_ms IS NULL AND u.email_verified = ?
                            WHERE r.email = ? AND r.consumed_at_ms IS NULL AND r.created_at_ms > ? ORDER BY r.created_at_ms DESC LIMIT 1)
                  AND (SELECT COUNT(*) FROM sign_up_requests WHERE email = ? AND consumed_at_ms IS NULL AND created_at_ms > ?) = 1
                  AND consumed_at_ms IS NULL
                RETURNING created_at_ms
                """,
                [
                    hmacs.short, hmacs.long, now.addingTimeInterval(policy.codeLifetimeSeconds),
                    false, email, now.addingTimeInterval(-policy.pendingSignUpSeconds),
                    email, now.addingTimeInterval(-policy.pendingSignUpSeconds),
                ])
            // Fresh attempts come only with a fresh code: a resend that renews nothing (no request, or several) leaves
            // the codes already mailed with the attempts they have left.
            guard let request = renewed.first else { return [] }
            try await resetCodeAttempts(tx, .verify, email: email)
            return [
                Mails.verificationCode(
                    to: email, code: code, minutes: Int(policy.codeLifetimeSeconds / 60), requestedAt: try request.date("created_at_ms"))
            ]
        }
        await send(mails, logger: logger)
    }

    /// Ends a pending (never verified) account at `email` whose address somebody has just proved they own another way
    /// (an email change, an operator's CLI): its sign-up requests die and the address is freed. A verified account is
    /// left alone; returns whether one holds the address. What other modules keep for the account is closed as for an
    /// erasure (``AccountErasureHook``): its `user.created` event carried the address to webhook receivers.
    func releasePendingAccount(_ tx: any SQLExecutor, email: String, now: Date) async throws -> Bool {
        try await tx.query("DELETE FROM sign_up_requests WHERE email = ?", [email])
        guard let holder = try await users.holder(tx, email: email, lock: true) else { return false }
        if holder.emailVerified { return true }
        let id = holder.id
        try await users.scrub(tx, id: id, now: now)
        try await erasure.accountErased(userID: id, at: now, executor: tx)
        try await AuditLog.record(tx, at: now, actor: "system", action: "pending_sign_up_released", subject: id, ip: nil)
        try await emitUserEvent(tx, "user.deleted", userID: id, email: nil, now: now)
        return false
    }
}
