import Clock
import Foundation
import Logging
import Mail
import Storage
import WebAuthn

/// A passkey as its owner sees it.
public struct Passkey: Sendable, Equatable {
    /// The credential id (base64url).
    public let id: String
    public let name: String
    public let createdAt: Date
    public let lastUsedAt: Date?
    /// The authenticator may sync it (iCloud Keychain, a password manager), and whether it has.
    public let backupEligible: Bool
    public let backedUp: Bool
}

/// What the app passes to `navigator.credentials.create` / `ASAuthorizationPlatformPublicKeyCredentialProvider`.
public struct PasskeyCreationOptions: Sendable {
    public let challenge: [UInt8]
    public let userHandle: [UInt8]
    public let userName: String
    public let displayName: String
    /// The account's passkeys (base64url ids), so the authenticator does not make a second one for this account.
    public let exclude: [String]
    public let expiresAt: Date
}

/// Passkeys (WebAuthn): registration behind a session, sign-in without one. The relying party's checks are the
/// WebAuthn module's; this adds what needs state: challenges used once, credentials, counters, budgets, sessions.
public struct PasskeyService: Sendable {
    let auth: AuthService
    public let relyingParty: RelyingParty
    let store = PasskeyStore()
    /// Passkeys one account may hold.
    public static let perAccountMax = 20
    public static let nameCharactersMax = 64

    public init(auth: AuthService, relyingParty: RelyingParty) {
        self.auth = auth
        self.relyingParty = relyingParty
    }

    /// The user handle the authenticator stores with the account's passkeys: a keyed hash of the account id (no
    /// personal data, the same for every passkey of the account).
    func userHandle(_ userID: String) -> [UInt8] { PasskeyChallenge.mac(Array("user handle".utf8), userID: userID, secrets: auth.secrets) }

    /// Options for a new passkey. Adding a way in needs presence, as unlinking one does: the current password, or a
    /// sign-in in the last 10 minutes for an account without one; with two-factor codes on, a code too (a passkey signs
    /// in without one). Owner profile only.
    public func registrationOptions(
        _ session: AuthenticatedSession, currentPassword: String, factor: SecondFactor?, client: ClientInfo, logger: Logger
    ) async throws -> PasskeyCreationOptions {
        try auth.requireOwnerProfile(session)
        try await auth.requirePresence(session, password: currentPassword, client: client, logger: logger)
        try await auth.requireSecondFactorIfEnabled(session, factor: factor, logger: logger)
        let existing = try await auth.database.withConnection(logger: logger) { tx in try await store.list(tx, userID: session.user.id) }
        guard existing.count < Self.perAccountMax else {
            throw AuthError.conflict("This account has \(Self.perAccountMax) passkeys, the most it may hold; remove one first.")
        }
        let challenge = PasskeyChallenge.issue(.register, userID: session.user.id, now: auth.clock.now(), secrets: auth.secrets)
        return PasskeyCreationOptions(
            challenge: challenge.bytes, userHandle: userHandle(session.user.id), userName: session.user.email, displayName: session.user.name,
            exclude: existing.map(\.credentialId), expiresAt: challenge.expiresAt)
    }

    /// Checks the authenticator's answer to ``registrationOptions(_:currentPassword:client:logger:)`` and keeps the
    /// passkey. The challenge works once; the owner is mailed.
    public func register(
        _ session: AuthenticatedSession, clientData: [UInt8], attestationObject: [UInt8], name: String?, client: ClientInfo, logger: Logger
    ) async throws -> Passkey {
        try auth.requireOwnerProfile(session)
        let label = try Self.label(name)
        let challenge = try webAuthn { try relyingParty.challenge(inClientData: clientData, ceremony: .create) }
        let expiresAt = try PasskeyChallenge.check(challenge, .register, userID: session.user.id, now: auth.clock.now(), secrets: auth.secrets)
        let credential = try webAuthn(rejectedIs400: true) { try relyingParty.registration(attestationObject: attestationObject) }
        let id = Base64URL.encode(credential.id)
        let (passkey, mails): (Passkey, [MailMessage])
        do {
            (passkey, mails) = try await keep(
                session, challenge: challenge, expiresAt: expiresAt, credential: credential, id: id, label: label, client: client, logger: logger)
        } catch StorageError.uniqueViolation {
            throw AuthError.conflict("This passkey is already registered.")
        }
        await auth.send(mails, logger: logger)
        return passkey
    }

    func keep(
        _ session: AuthenticatedSession, challenge: [UInt8], expiresAt: Date, credential: RelyingParty.NewCredential, id: String, label: String,
        client: ClientInfo, logger: Logger
    ) async throws -> (Passkey, [MailMessage]) {
        try await auth.sessionTransaction(session, logger: logger) { tx in
            let now = auth.clock.now()
            guard try await store.useChallenge(tx, hash: PasskeyChallenge.hash(challenge), expiresAt: expiresAt) else {
                throw AuthError.validation("This challenge was already used; ask for new options.")
            }
            // Options asked for before two-factor codes were turned on were given without a code: ask again, with one.
            let issuedAt = expiresAt.addingTimeInterval(-PasskeyChallenge.lifetimeSeconds)
            if let enabledAt = try await auth.secondFactorEnabledAt(tx, userID: session.user.id), enabledAt > issuedAt {
                throw AuthError.secondFactorRequired
            }
            guard try await store.count(tx, userID: session.user.id) < Self.perAccountMax else {
                throw AuthError.conflict("This account has \(Self.perAccountMax) passkeys, the most it may hold; remove one first.")
            }
            guard try await store.credential(tx, id: id) == nil else { throw AuthError.conflict("This passkey is already registered.") }
            // Two accounts registering one credential id at once: the primary key decides, the loser gets the same 409.
            try await store.insert(
                tx, credentialID: id, userID: session.user.id, userHandle: Base64URL.encode(userHandle(session.user.id)),
                publicKey: Base64URL.encode(credential.publicKey), algorithm: credential.algorithm, signCount: Int64(credential.signCount),
                name: label, backupEligible: credential.backupEligible, backedUp: credential.backedUp, now: now)
            try await AuditLog.record(tx, at: now, actor: session.user.id, action: "passkey_added", subject: session.user.id, ip: client.ip)
            let passkey = Passkey(
                id: id, name: label, createdAt: now, lastUsedAt: nil, backupEligible: credential.backupEligible, backedUp: credential.backedUp)
            // A new way in is always announced (never dropped by the notice budget, as Apple linking is not); at most 20.
            return (passkey, [Mails.passkeyAdded(to: session.user.email, client: client, at: now)])
        }
    }

    /// A challenge for a sign-in (discoverable credentials: no account named, nothing stored).
    public func signInOptions() -> (challenge: [UInt8], expiresAt: Date) {
        let issued = PasskeyChallenge.issue(.signIn, userID: "", now: auth.clock.now(), secrets: auth.secrets)
        return (issued.bytes, issued.expiresAt)
    }

    public func list(_ session: AuthenticatedSession, logger: Logger) async throws -> [Passkey] {
        try auth.requireOwnerProfile(session)
        return try await auth.database.withConnection(logger: logger) { tx in try await store.list(tx, userID: session.user.id) }.map(Self.passkey)
    }

    public func rename(_ session: AuthenticatedSession, id: String, name: String, logger: Logger) async throws -> Passkey {
        try auth.requireOwnerProfile(session)
        let label = try Self.label(name)
        return try await auth.sessionTransaction(session, logger: logger) { tx in
            guard try await store.rename(tx, id: id, userID: session.user.id, name: label),
                let row = try await store.list(tx, userID: session.user.id).first(where: { $0.credentialId == id })
            else { throw AuthError.notFound }
            return Self.passkey(row)
        }
    }

    /// Removes a passkey, never the account's last way in; needs presence as adding one does.
    public func delete(_ session: AuthenticatedSession, id: String, currentPassword: String, client: ClientInfo, logger: Logger) async throws {
        try auth.requireOwnerProfile(session)
        try await auth.requirePresence(session, password: currentPassword, client: client, logger: logger)
        try await auth.sessionTransaction(session, logger: logger) { tx in
            guard try await store.credential(tx, id: id)?.userId == session.user.id else { throw AuthError.notFound }
            try await auth.requireAnotherWayIn(tx, userID: session.user.id, removing: "This passkey")
            guard try await store.delete(tx, id: id, userID: session.user.id) else { throw AuthError.notFound }
            try await AuditLog.record(
                tx, at: auth.clock.now(), actor: session.user.id, action: "passkey_removed", subject: session.user.id, ip: client.ip)
        }
    }

    static func passkey(_ row: PasskeyStore.Row) -> Passkey {
        Passkey(
            id: row.credentialId, name: row.name, createdAt: row.createdAt, lastUsedAt: row.lastUsedAt, backupEligible: row.backupEligible,
            backedUp: row.backedUp)
    }

    static func label(_ name: String?) throws -> String {
        guard let name, !name.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else { return "Passkey" }
        if let problem = InputRules.textProblem(name, field: "Passkey name", charactersMax: nameCharactersMax, bytesMax: 256) {
            throw AuthError.validation(problem)
        }
        return name.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The WebAuthn module's refusals as Auth's: the client's bytes are a 400; a failed user or key check a 401.
    /// (`rejectedIs400`: on a signed-in endpoint, where a 401 would read as "signed out", a failed check is a 400 too.)
    func webAuthn<T>(rejectedIs400: Bool = false, _ body: () throws -> T) throws -> T {
        do { return try body() } catch let error as WebAuthnError {
            switch error {
            case .malformed(let detail), .unsupported(let detail), .mismatch(let detail): throw AuthError.validation(detail)
            case .rejected(let detail): throw rejectedIs400 ? AuthError.validation(detail) : AuthError.passkeyNotAccepted
            }
        }
    }
}
