import Clock
import Crypto
import Foundation
import Logging
import Mail
import Storage
import WebAuthn

/// A sign-in ceremony's answer, bytes decoded from base64url by the HTTP layer.
public struct PasskeyAssertion: Sendable {
    public let credentialID: String
    public let clientData: [UInt8]
    public let authenticatorData: [UInt8]
    public let signature: [UInt8]
    public let userHandle: [UInt8]?

    public init(credentialID: String, clientData: [UInt8], authenticatorData: [UInt8], signature: [UInt8], userHandle: [UInt8]?) {
        self.credentialID = credentialID
        self.clientData = clientData
        self.authenticatorData = authenticatorData
        self.signature = signature
        self.userHandle = userHandle
    }
}

extension PasskeyService {
    /// Signs in with a passkey. In order: the client data, the challenge and the authenticator data's own checks (this
    /// relying party, user present and verified) — no database, and the same answer whichever credential is named; then
    /// one transaction uses the challenge (a replay is refused) and reserves a failed sign-in from this network before the
    /// signature is checked (no budget of the credential's or the address's: a passkey cannot be guessed, and either
    /// could be locked by someone else). Every failure of the passkey itself answers one
    /// `invalid_credentials` and is recorded as a failed sign-in; a counter that did not move on (a cloned authenticator)
    /// is refused and audited. A passkey with user verification is both factors: no TOTP step. An unverified address is
    /// refused. A new device is told to the owner, as a password sign-in's.
    public func signIn(_ answer: PasskeyAssertion, client: ClientInfo, logger: Logger) async throws -> SignInOutcome {
        let challenge = try webAuthn { try relyingParty.challenge(inClientData: answer.clientData, ceremony: .get) }
        let expiresAt = try PasskeyChallenge.check(challenge, .signIn, userID: "", now: auth.clock.now(), secrets: auth.secrets)
        let data = try webAuthn { try relyingParty.authenticatorData(answer.authenticatorData) }
        let credential = try await auth.database.withConnection(logger: logger) { tx in try await store.credential(tx, id: answer.credentialID) }
        let attempt = try await reserve(challenge: challenge, expiresAt: expiresAt, client: client, logger: logger)
        if credential == nil { _ = COSEKey.es256(Self.standIn).isValidSignature(answer.signature, for: answer.authenticatorData + answer.clientData) }
        guard let credential, let counter = try verified(answer, credential, data) else {
            try await auth.recordFailure(attempt, userID: credential?.userId, client: client, logger: logger)
            throw AuthError.passkeyNotAccepted
        }
        let outcome: Result<(SignInOutcome, [MailMessage]), AuthError> = try await auth.database.transaction(logger: logger) { tx in
            let now = auth.clock.now()
            guard
                try await store.advance(
                    tx, id: credential.credentialId, from: credential.signCount, to: counter.count, backedUp: counter.backedUp, now: now)
            else {
                try await AuditLog.record(tx, at: now, actor: "system", action: "passkey_counter_replayed", subject: credential.userId, ip: client.ip)
                return .failure(.passkeyNotAccepted)
            }
            guard let user = try await auth.users.user(tx, id: credential.userId), user.emailVerified else { return .failure(.emailNotVerified) }
            let profileID = try await auth.profiles.defaultProfileID(tx, userID: user.id)
            let session = try await auth.createSession(tx, userID: user.id, profileID: profileID, client: client, now: now)
            let newDevice = try await auth.rememberDevice(tx, userID: user.id, client: client, now: now)
            try await AuditLog.record(tx, at: now, actor: user.id, action: "sign_in_passkey", subject: user.id, ip: client.ip)
            let notify = newDevice ? try await auth.takeMailBudget(tx, .notice, email: user.email, now: now) == .allowed : false
            return .success((.session(user, session), notify ? [Mails.newDevice(to: user.email, client: client, at: now)] : []))
        }
        switch outcome {
        case .success(let (result, mails)):
            await auth.refundNetwork(attempt, logger: logger)
            await auth.send(mails, logger: logger)
            return result
        case .failure(let error):
            if error == .passkeyNotAccepted { try await auth.recordFailure(attempt, userID: credential.userId, client: client, logger: logger) }
            throw error
        }
    }

    /// A key no credential has: an unknown credential's signature is checked against it, so the answer takes as long.
    static let standIn = P256.Signing.PrivateKey().publicKey

    /// Uses the challenge and reserves a failed sign-in from the network, in one transaction (all or nothing). No budget
    /// of the credential's own: a passkey cannot be guessed, and one that locked would let anyone who saw a credential id
    /// keep its owner out (and mail them), as the address's password budget did before.
    func reserve(
        challenge: [UInt8], expiresAt: Date, client: ClientInfo, logger: Logger
    ) async throws -> AuthService.SignInAttempt {
        try await auth.database.transaction(lane: auth.keys.network(ip: client.ip), logger: logger) { tx in
            let now = auth.clock.now()
            guard try await store.useChallenge(tx, hash: PasskeyChallenge.hash(challenge), expiresAt: expiresAt) else {
                throw AuthError.validation("This challenge was already used; ask for new options.")
            }
            let networkKey = auth.keys.network(ip: client.ip)
            let network = try await AttemptBudget.reserve(tx, key: networkKey, rule: auth.policy.networkRule, now: now)
            guard case .reserved(let networkAttempt) = network else {
                throw AuthError.rateLimited(
                    retryAfterSeconds: network.retryAfterSeconds, detail: "Too many failed sign-ins from this network; try again later.")
            }
            return AuthService.SignInAttempt(accountKey: nil, networkKey: networkKey, network: networkAttempt)
        }
    }

    /// The assertion's new counter and backup state when its signature verifies with the stored key, the user handle
    /// (when sent) is the account's, and backup eligibility has not changed; nil otherwise. For an unknown credential the
    /// caller never gets here; ``signIn(_:client:logger:)`` checks a stand-in signature so both take the same time.
    func verified(_ answer: PasskeyAssertion, _ credential: PasskeyStore.Row, _ data: AuthenticatorData) throws -> (count: Int64, backedUp: Bool)? {
        guard let keyBytes = Base64URL.decode(credential.publicKey, bytesMax: 4_096) else { return nil }
        let key = try webAuthn { try COSEKey(cbor: keyBytes) }
        let signed = answer.authenticatorData + Array(SHA256.hash(data: answer.clientData))
        guard key.isValidSignature(answer.signature, for: signed) else { return nil }
        if let handle = answer.userHandle, Base64URL.encode(handle) != credential.userHandle { return nil }
        guard data.backupEligible == credential.backupEligible else { return nil }
        return (Int64(data.signCount), data.backedUp)
    }
}
