import Clock
import Foundation
import Logging
import Mail
import Storage

extension AuthService {
    /// Mails a reset code to a verified account, within the reset mail budget (its own, so sign-up mail cannot starve it).
    /// Every address takes from the same budget, runs the same statements (a code is stored and the request audited
    /// whether or not an account exists; only a verified account's code is mailed) and answers the same: 200, or 429
    /// while throttled. The mail goes out after the answer (``MailQueue``).
    public func forgotPassword(email rawEmail: String, client: ClientInfo, logger: Logger) async throws {
        guard let email = InputRules.normalizedEmail(rawEmail) else { throw AuthError.validation("Enter a valid email address.") }
        let mails: [MailMessage] = try await database.transaction(lane: BudgetKeys.address(email), logger: logger) { tx in
            let now = clock.now()
            let user = try await startCodeMail(tx, .reset, email: email, now: now)
            let code = try await issueCode(tx, email: email, purpose: .reset, now: now)
            try await resetCodeAttempts(tx, .reset, email: email)
            try await AuditLog.record(
                tx, at: now, actor: "anonymous", action: "password_reset_requested", subject: user?.id, ip: client.ip)
            guard let user, user.emailVerified else { return [] }
            return [Mails.resetCode(to: email, code: code, minutes: Int(policy.codeLifetimeSeconds / 60))]
        }
        await send(mails, logger: logger)
    }

    /// Sets a new password with a reset code: revokes every session and lifts a sign-in lock. The code is checked (its
    /// attempt reserved first) before the new password is hashed, so bogus resets cost no Argon2 work; the code is used up
    /// in the transaction that sets the password, so a failed hash leaves it usable.
    public func resetPassword(email rawEmail: String, code: String, newPassword: String, client: ClientInfo, logger: Logger) async throws {
        guard let email = InputRules.normalizedEmail(rawEmail) else { throw AuthError.validation("Enter a valid email address.") }
        let code = try TypedCode(code)
        if let problem = InputRules.passwordProblem(newPassword) { throw AuthError.validation(problem) }
        let attempt = try await reserveCheck(code, .reset, email: email, logger: logger)
        let check = try await database.transaction(logger: logger) { tx in
            try await checkCode(tx, email: email, purpose: .reset, code: code, attempt: attempt, consume: false, now: clock.now())
        }
        guard case .ok = check else { throw check.error }
        try await reserveHashing(ip: client.ip, logger: logger)
        let newHash = try await hashPassword(newPassword)
        let accountKey = keys.password(email: email)
        let outcome: Result<[MailMessage], AuthError> = try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            let recheck = try await checkCode(tx, email: email, purpose: .reset, code: code, attempt: 0, consume: true, now: now)
            guard case .ok = recheck else { return .failure(recheck == .used ? .otpAlreadyUsed : recheck.error) }
            // Only a verified account is reset: a pending one takes a password only from its own sign-up's code.
            guard let user = try await users.holder(tx, email: email), user.emailVerified else { return .failure(.invalidOTP(attemptsRemaining: 0)) }
            let userID = user.id
            try await users.setPasswordHash(tx, id: userID, newHash, now: now)
            try await signOutEverywhere(tx, userID: userID, now: now)
            try await AttemptBudget.clear(tx, key: accountKey)
            try await AuditLog.record(tx, at: now, actor: userID, action: "password_reset", subject: userID, ip: client.ip)
            return .success([Mails.passwordChanged(to: email)])
        }
        await send(try outcome.get(), logger: logger)
    }

    /// Changes the password after checking the current one (owner profile only); every other session is revoked.
    public func changePassword(
        _ session: AuthenticatedSession, currentPassword: String, newPassword: String, client: ClientInfo, logger: Logger
    ) async throws {
        try requireOwnerProfile(session)
        if let problem = InputRules.passwordProblem(newPassword) { throw AuthError.validation(problem) }
        let checked = try await passwords.require(currentPassword, of: session.user, ip: client.ip, logger: logger)
        let newHash = try await hashPassword(newPassword)
        try await commitPasswordChange(session, checkedHash: checked, newHash: newHash, client: client, logger: logger)
        await send([Mails.passwordChanged(to: session.user.email)], logger: logger)
    }

    /// Writes a changed password, once the account's row is locked, only if the hash the current password was checked
    /// against is still the account's and the session is still live: a reset or a revocation that committed during the
    /// Argon2 work wins (a reviewer showed a stolen session looping change-password undoing the owner's reset).
    func commitPasswordChange(
        _ session: AuthenticatedSession, checkedHash: String?, newHash: String, client: ClientInfo, logger: Logger
    ) async throws {
        let outcome: Result<Void, AuthError> = try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            guard try await users.passwordHash(tx, id: session.user.id, liveOnly: true, lock: true) == checkedHash else {
                return .failure(.invalidPassword)
            }
            // The password makes the session a recent sign-in only where it is all a sign-in asks: with two-factor codes on,
            // that takes POST /api/auth/reauthenticate with a code (a stolen session must not make keys this way).
            let passwordIsAll = try await secondFactorEnabledAt(tx, userID: session.user.id) == nil
            guard try await sessions.markAuthenticated(tx, sessionID: session.sessionID, now: now, recent: passwordIsAll) else {
                return .failure(.unauthorized)
            }
            try await users.setPasswordHash(tx, id: session.user.id, newHash, now: now)
            try await signOutEverywhere(tx, userID: session.user.id, except: session.sessionID, now: now)
            try await AuditLog.record(tx, at: now, actor: session.user.id, action: "password_changed", subject: session.user.id, ip: client.ip)
            return .success(())
        }
        try outcome.get()
    }
}
