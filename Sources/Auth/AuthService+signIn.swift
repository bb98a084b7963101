import Clock
import Foundation
import Logging
import Mail
import Storage

extension AuthService {
    /// The attempts one sign-in reserved before its check: the address's password checks (nil for a passkey, which
    /// cannot be guessed) and the network's failed sign-ins.
    struct SignInAttempt {
        var accountKey: String?
        var account = 0
        let networkKey: String
        let network: Int

        /// A right password: the address's checks start again.
        func succeeded(_ tx: any SQLExecutor, now: Date) async throws {
            if let accountKey { try await AttemptBudget.succeeded(tx, key: accountKey, attempt: account, now: now) }
        }
    }

    /// Checks the password and opens a session. Unknown addresses and wrong passwords answer the same, after the same
    /// Argon2 work. Before the hash, one transaction reserves an attempt in three budgets (Argon2 runs per IP, failed
    /// sign-ins per IP, password checks per address); a refusal in any of them answers 429 and reserves nothing.
    public func signIn(email rawEmail: String, password: String, client: ClientInfo, logger: Logger) async throws -> SignInOutcome {
        guard password.utf8.count <= InputRules.passwordBytesMax else {
            throw AuthError.validation("Password must be at most \(InputRules.passwordBytesMax) bytes.")
        }
        guard rawEmail.utf8.count <= InputRules.emailBytesMax else { throw AuthError.validation("Enter a valid email address.") }
        let email = InputRules.normalizedEmail(rawEmail) ?? rawEmail.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
        let attempt = try await reserveSignIn(email: email, ip: client.ip, logger: logger)
        // A pending account has no password; the newest sign-up request's stands in, so only whoever typed it learns
        // `email_not_verified` (everyone else meets `invalid_credentials`, as for an unknown address).
        let outcome = try await checkPassword(password, email: email, attempt: attempt, client: client, logger: logger) { row, storedHash in
            let rehash = hasher.needsRehash(storedHash) ? try await hashPassword(password) : nil
            return try await openSession(row, checkedHash: storedHash, rehash: rehash, attempt: attempt, client: client, logger: logger)
        }
        await refundNetwork(attempt, logger: logger)  // the right password (of a pending account too)
        let (result, mails) = try outcome.get()
        await send(mails, logger: logger)
        return result
    }

    /// The password check of both sign-ins (the app's and the console's): `password` against the account's hash (an
    /// unknown address against a stand-in, after the same Argon2 work), then `open` with the hash it matched. `open`
    /// checks that hash again under the account's lock and answers nil when it changed in between (a reset or change
    /// committed, or another sign-in rehashed it); the password is then checked once more against the hash now in force.
    /// A wrong password is recorded against `attempt` and answers `invalid_credentials`.
    func checkPassword<T>(
        _ password: String, email: String, attempt: SignInAttempt, client: ClientInfo, logger: Logger,
        open: (UserStore.SignInCandidate, _ checkedHash: String) async throws -> T?
    ) async throws -> T {
        for _ in 0..<2 {
            let row = try await database.withConnection(logger: logger) { tx in try await users.signInCandidate(tx, email: email) }
            let storedHash = row?.passwordHash
            let matches = try await passwords.verify(password, storedHash ?? hasher.dummyHash) && storedHash != nil
            guard matches, let row, let storedHash else {
                try await recordFailure(attempt, userID: row?.id, client: client, logger: logger)
                throw AuthError.invalidCredentials
            }
            if let opened = try await open(row, storedHash) { return opened }
        }
        throw AuthError.invalidCredentials
    }

    /// Opens the session (or the two-factor challenge) for a password just checked against `checkedHash`; nil when the
    /// account's hash is no longer that one once its row is locked (see ``signOutEverywhere(_:userID:except:now:)``).
    func openSession(
        _ row: UserStore.SignInCandidate, checkedHash: String, rehash: String?, attempt: SignInAttempt, client: ClientInfo, logger: Logger
    ) async throws -> Result<(SignInOutcome, [MailMessage]), AuthError>? {
        let userID = row.id
        return try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            if row.emailVerified {
                guard try await users.passwordHash(tx, id: userID, liveOnly: true, lock: true) == checkedHash else { return nil }
            }
            try await attempt.succeeded(tx, now: now)
            guard row.emailVerified else { return .failure(.emailNotVerified) }
            if let rehash { try await users.setPasswordHash(tx, id: userID, rehash, now: now) }
            if let challenge = try await mfaChallenge(tx, userID: userID, now: now) {
                try await AuditLog.record(tx, at: now, actor: userID, action: "sign_in_password_ok_mfa_pending", subject: userID, ip: client.ip)
                return .success((.mfaRequired(token: challenge.token, expiresAt: challenge.expiresAt), []))
            }
            let profileID = try await profiles.defaultProfileID(tx, userID: userID)
            let session = try await createSession(tx, userID: userID, profileID: profileID, client: client, now: now)
            let newDevice = try await rememberDevice(tx, userID: userID, client: client, now: now)
            try await AuditLog.record(tx, at: now, actor: userID, action: "sign_in", subject: userID, ip: client.ip)
            let user = try await loadUser(tx, id: userID)
            let notify = newDevice ? try await takeMailBudget(tx, .notice, email: user.email, now: now) == .allowed : false
            return .success((.session(user, session), notify ? [Mails.newDevice(to: user.email, client: client, at: now)] : []))
        }
    }

    /// Reserves the sign-in's attempts in one transaction: all three or none.
    func reserveSignIn(email: String, ip: String, logger: Logger) async throws -> SignInAttempt {
        let accountKey = keys.password(email: email)
        let networkKey = keys.network(ip: ip)
        let hashingKey = keys.hashing(ip: ip)
        // The network's lane, then the address's (always in this order): many networks against one address, or one
        // network against many addresses, hold a few connections either way.
        return try await RowLanes.shared.run(networkKey) {
            try await database.transaction(lane: accountKey, logger: logger) { tx in
                let now = clock.now()
                if case .refused(let seconds, _) = try await AttemptBudget.reserve(tx, key: hashingKey, rule: policy.hashingRule, now: now) {
                    throw AuthError.rateLimited(retryAfterSeconds: seconds, detail: "Too many sign-ins from this network; try again shortly.")
                }
                let network = try await AttemptBudget.reserve(tx, key: networkKey, rule: policy.networkRule, now: now)
                guard case .reserved(let networkAttempt) = network else {
                    throw AuthError.rateLimited(
                        retryAfterSeconds: network.retryAfterSeconds, detail: "Too many failed sign-ins from this network; try again later.")
                }
                let account = try PasswordCheck.attempt(try await AttemptBudget.reserve(tx, key: accountKey, rule: policy.passwordRule, now: now))
                return SignInAttempt(accountKey: accountKey, account: account, networkKey: networkKey, network: networkAttempt)
            }
        }
    }

    /// A failed password check writes nothing to the budgets (the reservation was the count); the attempt that reached a
    /// limit audits the lock it set, and the owner of a locked address is told (within the notice mail budget).
    /// A right password gives the per-network failure budget its attempt back (on the console and with a passkey only a
    /// session opened: a refused role or second factor keeps it spent), in a transaction of its own: every sign-in from one address (a carrier NAT, an office) passes through
    /// that row, so it is held for one statement, not for the session's writes, and never in the opposite lock order to
    /// the reservation's, which takes the network's row before the address's. Lost (the lane full), it only counts one
    /// failure too many. The app's, the console's and the passkey sign-in all come here.
    func refundNetwork(_ attempt: SignInAttempt, logger: Logger) async {
        try? await database.transaction(lane: attempt.networkKey, logger: logger) { tx in
            try await AttemptBudget.refund(tx, key: attempt.networkKey)
        }
    }

    func recordFailure(_ attempt: SignInAttempt, userID: String?, client: ClientInfo, logger: Logger) async throws {
        let accountLocked = attempt.accountKey != nil && attempt.account >= policy.passwordRule.limit
        let networkLocked = attempt.network >= policy.networkRule.limit
        guard accountLocked || networkLocked else { return }
        let mails: [MailMessage] = try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            if networkLocked { try await AuditLog.record(tx, at: now, actor: "system", action: "ip_locked", subject: nil, ip: client.ip) }
            guard accountLocked else { return [] }
            try await AuditLog.record(tx, at: now, actor: "system", action: "account_locked", subject: userID, ip: client.ip)
            guard let userID, let email = try await users.email(tx, id: userID),
                try await takeMailBudget(tx, .notice, email: email, now: now) == .allowed
            else { return [] }
            return [Mails.accountLocked(to: email, minutes: Int(policy.lockSeconds / 60))]
        }
        await send(mails, logger: logger)
    }
}

extension AttemptReservation {
    var retryAfterSeconds: Int {
        if case .refused(let seconds, _) = self { return seconds }
        return 0
    }
}
