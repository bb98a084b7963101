import Clock
import Events
import Foundation
import Logging
import Mail
import Storage

/// What a verified Sign in with Apple token says about the person (the verification is the caller's: the Identity module).
public struct AppleSignIn: Sendable {
    public let subject: String
    public let email: String?
    public let emailVerified: Bool

    public init(subject: String, email: String?, emailVerified: Bool) {
        self.subject = subject
        self.email = email
        self.emailVerified = emailVerified
    }
}

/// A way an account signs in.
public struct SignInMethod: Sendable, Equatable {
    /// `password`, `apple` or `passkey` (one per passkey).
    public let provider: String
    /// The address Apple shared (a relay address included); nil for the password.
    public let email: String?
    public let linkedAt: Date?
}

extension AuthService {
    /// Signs in with a verified Apple identity. The account is found by Apple's `sub`. Otherwise, with a verified email in
    /// the token: a verified account with that address is linked (its owner gets a notice), an unfinished sign-up for it
    /// is replaced (its password and codes dropped: Apple has proved the address, the sign-up has not), and with no
    /// account one is made, verified, with the default profile and the welcome tokens, exactly as verification does.
    /// Returns the user, a new session, and whether an account was made.
    public func signInWithApple(
        _ identity: AppleSignIn, name: String?, client: ClientInfo, logger: Logger
    ) async throws -> (outcome: SignInOutcome, created: Bool) {
        if let name, let problem = InputRules.nameProblem(name) { throw AuthError.validation(problem) }
        do {
            return try await appleTransaction(identity, name: name, client: client, logger: logger)
        } catch StorageError.uniqueViolation {
            // The same Apple user (or address) signed in twice at once: the other request made the link; use it.
            return try await appleTransaction(identity, name: name, client: client, logger: logger)
        }
    }

    func appleTransaction(
        _ identity: AppleSignIn, name: String?, client: ClientInfo, logger: Logger
    ) async throws -> (outcome: SignInOutcome, created: Bool) {
        let outcome: (SignInOutcome, Bool, [MailMessage]) = try await database.transaction(lane: "apple:" + identity.subject, logger: logger) { tx in
            let now = clock.now()
            let (userID, created, mails) = try await appleAccount(tx, identity, name: name, client: client, now: now)
            try await tx.query(
                "UPDATE user_identities SET last_used_at_ms = ? WHERE provider = 'apple' AND subject = ?", [now, identity.subject])
            // Apple proves the Apple ID, not the account's second factor: with TOTP on, the same challenge as a password.
            if let challenge = try await mfaChallenge(tx, userID: userID, now: now) {
                try await AuditLog.record(tx, at: now, actor: userID, action: "sign_in_apple_mfa_pending", subject: userID, ip: client.ip)
                return (.mfaRequired(token: challenge.token, expiresAt: challenge.expiresAt), created, mails)
            }
            let profileID = try await profiles.defaultProfileID(tx, userID: userID)
            let session = try await createSession(tx, userID: userID, profileID: profileID, client: client, now: now)
            _ = try await rememberDevice(tx, userID: userID, client: client, now: now)
            try await AuditLog.record(tx, at: now, actor: userID, action: "sign_in_apple", subject: userID, ip: client.ip)
            return (.session(try await loadUser(tx, id: userID), session), created, mails)
        }
        await send(outcome.2, logger: logger)
        return (outcome.0, outcome.1)
    }

    /// The account for this Apple user: linked, linked now, or made now.
    func appleAccount(
        _ tx: any SQLExecutor, _ identity: AppleSignIn, name: String?, client: ClientInfo, now: Date
    ) async throws -> (userID: String, created: Bool, mails: [MailMessage]) {
        // The link is locked until the session is made: Apple's consent-revoked deletes it before signing out everywhere,
        // so a sign-in racing it either lands first and is revoked, or finds no link.
        let lock = tx.dialect.forNoKeyUpdate.isEmpty ? "" : tx.dialect.forNoKeyUpdate + " OF i"
        if let linked = try await tx.first(
            "SELECT i.user_id FROM user_identities i JOIN users u ON u.id = i.user_id WHERE i.provider = 'apple' AND i.subject = ? AND u.deleted_at_ms IS NULL"
                + lock,
            [identity.subject])
        {
            return (try linked.string("user_id"), false, [])
        }
        // ASCII addresses only here: lowercasing must not fold another script's letter onto an existing account's address.
        guard let raw = identity.email, raw.allSatisfy(\.isASCII), let email = InputRules.normalizedEmail(raw), identity.emailVerified else {
            throw AuthError.validation("Apple shared no verified email address for this Apple ID; sign in with Apple again and share an email.")
        }
        let existing = try await users.holder(tx, email: email, lock: true)
        let userID: String
        var created = false
        var mails: [MailMessage] = []
        if let existing, existing.emailVerified {
            userID = existing.id
            mails.append(Mails.appleLinked(to: email))
            try await AuditLog.record(tx, at: now, actor: userID, action: "apple_linked", subject: userID, ip: client.ip)
        } else {
            let displayName = (name?.trimmingCharacters(in: .whitespacesAndNewlines)).flatMap { $0.isEmpty ? nil : $0 } ?? "Apple user"
            if let existing {
                // An unfinished sign-up for the address: Apple proved the address, the sign-up did not; it is replaced.
                userID = existing.id
                try await users.verify(tx, id: userID, name: displayName, passwordHash: nil, now: now)
                try await tx.query("DELETE FROM sign_up_requests WHERE email = ?", [email])
            } else {
                userID = FreshID.uuid()
                try await users.insert(tx, id: userID, email: email, name: displayName, passwordHash: nil, verified: true, role: "user", now: now)
                try await emitUserEvent(
                    tx, "user.created", userID: userID, email: email, now: now, ["emailVerified": .bool(true), "role": .string("user")])
            }
            created = true
            _ = try await ensureDefaultProfile(tx, userID: userID, name: displayName, now: now)
            let granted = try await welcome.grantWelcomeTokens(userID: userID, amountTokens: welcomeTokens, at: now, executor: tx)
            try await emitUserEvent(
                tx, "user.verified", userID: userID, email: email, now: now, ["welcomeTokens": .int(Int64(granted)), "via": .string("apple")])
            try await AuditLog.record(tx, at: now, actor: userID, action: "apple_account_created", subject: userID, ip: client.ip)
        }
        try await tx.query(
            "INSERT INTO user_identities (provider, subject, user_id, email, created_at_ms, last_used_at_ms) VALUES ('apple', ?, ?, ?, ?, ?)",
            [identity.subject, userID, email, now, now])
        return (userID, created, mails)
    }

    /// How the account signs in: `password` when it has one, and each linked provider.
    public func signInMethods(userID: String, logger: Logger) async throws -> [SignInMethod] {
        try await database.withConnection(logger: logger) { tx in
            var methods: [SignInMethod] = []
            if try await users.passwordHash(tx, id: userID) != nil {
                methods.append(SignInMethod(provider: "password", email: nil, linkedAt: nil))
            }
            for row in try await tx.query(
                "SELECT provider, email, created_at_ms FROM user_identities WHERE user_id = ? ORDER BY created_at_ms", [userID])
            {
                methods.append(
                    SignInMethod(provider: try row.string("provider"), email: row.optionalString("email"), linkedAt: try row.date("created_at_ms")))
            }
            for passkey in try await PasskeyStore().list(tx, userID: userID) {
                methods.append(SignInMethod(provider: "passkey", email: nil, linkedAt: passkey.createdAt))
            }
            return methods
        }
    }

    /// Apple's server-to-server events for an Apple user: `consent-revoked` revokes the account's sessions (and the link),
    /// `account-delete` erases the account as `DELETE /api/user/me` does; email events are recorded. Unknown users and
    /// types are recorded and ignored (Apple retries only on failure). Each notification applies once (by its id), and an
    /// event older than the current link is ignored. Returns what was done.
    public func appleEvent(type: String, subject: String, id: String, eventTime: Date?, logger: Logger) async throws -> String {
        try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            guard
                !(try await tx.query(
                    "INSERT INTO apple_signin_events (jti, received_at_ms) VALUES (?, ?) ON CONFLICT (jti) DO NOTHING RETURNING jti", [id, now]))
                    .isEmpty
            else { return "already applied" }
            guard
                let row = try await tx.first(
                    "SELECT i.user_id, u.email, i.created_at_ms FROM user_identities i JOIN users u ON u.id = i.user_id WHERE i.provider = 'apple' AND i.subject = ? AND u.deleted_at_ms IS NULL",
                    [subject])
            else { return "unknown Apple user" }
            // An event from before the current link (an old notification for an earlier link; a minute of clock leeway)
            // changes nothing.
            if let eventTime, eventTime.addingTimeInterval(60) < (try row.date("created_at_ms")) { return "older than the current link" }
            let userID = try row.string("user_id")
            switch type {
            case "consent-revoked":
                try await tx.query("DELETE FROM user_identities WHERE provider = 'apple' AND subject = ?", [subject])
                try await signOutEverywhere(tx, userID: userID, now: now)
                try await AuditLog.record(tx, at: now, actor: "apple", action: "apple_consent_revoked", subject: userID, ip: nil)
                return "sessions revoked"
            case "account-delete":
                try await erase(tx, userID: userID, email: row.optionalString("email"), actor: "apple", ip: nil)
                return "account erased"
            default:
                try await AuditLog.record(tx, at: now, actor: "apple", action: "apple_\(type.prefix(40))", subject: userID, ip: nil)
                return "recorded"
            }
        }
    }
}

extension AuthService {
    /// Unlinks a provider (owner profile; the current password, or a recent sign-in for an account without one). An account
    /// may not remove its last way in: unlinking Apple from an account without a password is 409 (set a password first
    /// with the reset flow).
    public func unlinkSignInMethod(
        _ session: AuthenticatedSession, provider: String, currentPassword: String, client: ClientInfo, logger: Logger
    ) async throws {
        try requireOwnerProfile(session)
        guard provider == "apple" else {
            throw AuthError.validation("Only 'apple' can be unlinked; the password is changed, not removed (got '\(provider.prefix(20))').")
        }
        try await requirePresence(session, password: currentPassword, client: client, logger: logger)
        try await sessionTransaction(session, logger: logger) { tx in
            let now = clock.now()
            guard try await tx.first("SELECT subject FROM user_identities WHERE user_id = ? AND provider = 'apple'", [session.user.id]) != nil else {
                throw AuthError.notFound
            }
            try await requireAnotherWayIn(tx, userID: session.user.id, removing: "Apple")
            try await tx.query("DELETE FROM user_identities WHERE user_id = ? AND provider = 'apple'", [session.user.id])
            try await AuditLog.record(tx, at: now, actor: session.user.id, action: "apple_unlinked", subject: session.user.id, ip: client.ip)
        }
    }
}
