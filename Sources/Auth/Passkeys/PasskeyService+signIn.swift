import Clock
import Foundation
import Logging
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
    /// Signs in with a passkey. In order: the client data and the challenge are checked (no database); one transaction
    /// uses the challenge (a replay is refused) and reserves the password flows' attempts — a failed sign-in from this
    /// network, and for a known passkey a check of its account's address — before the signature is checked; a failure
    /// of any kind answers one `invalid_credentials`. A counter that did not move on (a cloned authenticator) is refused
    /// and audited. A passkey with user verification is both factors: no TOTP step. An unverified address is refused.
    public func signIn(_ answer: PasskeyAssertion, client: ClientInfo, logger: Logger) async throws -> SignInOutcome {
        let challenge = try webAuthn { try relyingParty.challenge(inClientData: answer.clientData, ceremony: .get) }
        let expiresAt = try PasskeyChallenge.check(challenge, .signIn, userID: "", now: auth.clock.now(), secrets: auth.secrets)
        let credential = try await auth.database.withConnection(logger: logger) { tx in try await store.credential(tx, id: answer.credentialID) }
        let attempt: AuthService.SignInAttempt = try await auth.database.transaction(logger: logger) { tx in
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
            var accountKey = "", account = 0
            if let credential, let email = try await auth.users.email(tx, id: credential.userId) {
                accountKey = auth.keys.password(email: email)
                account = try PasswordCheck.attempt(try await AttemptBudget.reserve(tx, key: accountKey, rule: auth.policy.passwordRule, now: now))
            }
            return AuthService.SignInAttempt(accountKey: accountKey, account: account, networkKey: networkKey, network: networkAttempt)
        }
        guard let credential, let counter = try verified(answer, credential) else {
            try await auth.recordFailure(attempt, userID: credential?.userId, client: client, logger: logger)
            throw AuthError.passkeyNotAccepted
        }
        let outcome: Result<SignInOutcome, AuthError> = try await auth.database.transaction(logger: logger) { tx in
            let now = auth.clock.now()
            guard
                try await store.advance(
                    tx, id: credential.credentialId, from: credential.signCount, to: counter.count, backedUp: counter.backedUp, now: now)
            else {
                try await AuditLog.record(tx, at: now, actor: "system", action: "passkey_counter_replayed", subject: credential.userId, ip: client.ip)
                return .failure(.passkeyNotAccepted)
            }
            if !attempt.accountKey.isEmpty { try await AttemptBudget.succeeded(tx, key: attempt.accountKey, attempt: attempt.account, now: now) }
            guard let user = try await auth.users.user(tx, id: credential.userId), user.emailVerified else { return .failure(.emailNotVerified) }
            let profileID = try await auth.profiles.defaultProfileID(tx, userID: user.id)
            let session = try await auth.createSession(tx, userID: user.id, profileID: profileID, client: client, now: now)
            _ = try await auth.rememberDevice(tx, userID: user.id, client: client, now: now)
            try await AuditLog.record(tx, at: now, actor: user.id, action: "sign_in_passkey", subject: user.id, ip: client.ip)
            return .success(.session(user, session))
        }
        if case .success = outcome {
            try? await auth.database.transaction(logger: logger) { tx in try await AttemptBudget.refund(tx, key: attempt.networkKey) }
        }
        return try outcome.get()
    }

    /// The assertion's new counter and backup state when it verifies with the stored key and the user handle (when
    /// sent) is the account's; nil when it does not. Malformed bytes are a 400.
    func verified(_ answer: PasskeyAssertion, _ credential: PasskeyStore.Row) throws -> (count: Int64, backedUp: Bool)? {
        guard let keyBytes = Base64URL.decode(credential.publicKey, bytesMax: 4_096) else { return nil }
        if let handle = answer.userHandle, Base64URL.encode(handle) != credential.userHandle { return nil }
        let key = try webAuthn { try COSEKey(cbor: keyBytes) }
        do {
            let data = try relyingParty.assertion(
                authenticatorData: answer.authenticatorData, clientData: answer.clientData, signature: answer.signature, key: key)
            return (Int64(data.signCount), data.backedUp)
        } catch .rejected {
            return nil
        } catch {
            return try webAuthn { throw error }
        }
    }
}
