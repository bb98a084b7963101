import Clock
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Storage
import TestSupport
import Testing
import WebAuthn

@testable import AccountAPI

/// Passkeys over HTTP with a software authenticator (ES256 and RS256), on both engines.
@Suite("Passkeys over HTTP")
struct PasskeyHTTPTests {
    struct CreationOptions: Decodable {
        struct Party: Decodable { let id: String; let name: String }
        struct UserEntity: Decodable { let id: String; let name: String }
        struct Parameter: Decodable { let alg: Int }
        struct Descriptor: Decodable { let id: String }
        let rp: Party; let user: UserEntity; let challenge: String; let pubKeyCredParams: [Parameter]; let excludeCredentials: [Descriptor]
        let attestation: String
    }
    struct RequestOptions: Decodable { let challenge: String; let rpId: String; let allowCredentials: [String] }
    struct PasskeyJSON: Decodable { let id: String; let name: String; let backedUp: Bool; let lastUsedAt: String? }
    struct Created: Decodable { let passkey: PasskeyJSON }
    struct Listed: Decodable { let passkeys: [PasskeyJSON] }
    struct SignedIn: Decodable {
        let user: User; let session: Session; struct User: Decodable { let id: String }; struct Session: Decodable { let token: String }
    }

    static func configure(_ config: inout AppConfig) {
        config.relyingParty = RelyingParty(id: "example.com", name: "Example", origins: ["https://example.com"])
    }

    static func json(_ object: [String: Any], name: String? = nil) throws -> String {
        var object = object
        if let name { object["name"] = name }
        return String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self)
    }

    /// Registration options, then the authenticator's answer; returns the answer and the device.
    static func register(
        _ client: any TestClientProtocol, token: String, algorithm: SoftAuthenticator.Algorithm = .es256, name: String = "iPhone"
    ) async throws -> (TestResponse, SoftAuthenticator) {
        let options = try await client.send(
            .post, "/api/auth/passkeys/register/options", token: token, json: #"{"currentPassword":"correct horse battery"}"#)
        #expect(options.status == .ok, "\(String(buffer: options.body))")
        let parsed = try options.json(CreationOptions.self)
        let device = try SoftAuthenticator(
            rpID: parsed.rp.id, origin: "https://example.com", userHandle: try #require(Base64URL.decode(parsed.user.id, bytesMax: 64)),
            algorithm: algorithm)
        let answer = try await client.send(
            .post, "/api/auth/passkeys/register/verify", token: token,
            json: try json(try device.registration(challenge: parsed.challenge), name: name))
        return (answer, device)
    }

    /// Sign-in options, then the device's assertion (the device's counter moves on).
    static func signIn(_ client: any TestClientProtocol, _ device: inout SoftAuthenticator) async throws -> (TestResponse, String) {
        let options = try await client.post("/api/auth/passkeys/sign-in/options", json: "")
        let challenge = try options.json(RequestOptions.self).challenge
        let body = try json(try device.assertion(challenge: challenge))
        return (try await client.post("/api/auth/passkeys/sign-in/verify", json: body), body)
    }

    @Test(arguments: Engine.allCases)
    func registerSignInAndTheRefusals(engine: Engine) async throws {
        try await TestApp.run(engine, configure: Self.configure) { client, app in
            let token = try await client.signUpAndVerify(app, email: "pk@example.com")
            let noPassword = try await client.send(.post, "/api/auth/passkeys/register/options", token: token)
            #expect(noPassword.status == .forbidden, "adding a way in needs the password")
            let (created, device) = try await Self.register(client, token: token)
            #expect(created.status == .created, "\(String(buffer: created.body))")
            #expect(try created.json(Created.self).passkey.name == "iPhone")
            #expect(try await app.mails(to: "pk@example.com").contains { $0.contains("A passkey was added") })
            // The same answer again: its challenge is used.
            let replayed = try await client.send(
                .post, "/api/auth/passkeys/register/verify", token: token,
                json: try Self.json(try device.registration(challenge: Base64URL.encode([1]))))
            #expect(replayed.status == .badRequest)

            var phone = device
            let (signedIn, body) = try await Self.signIn(client, &phone)
            #expect(signedIn.status == .ok, "\(String(buffer: signedIn.body))")
            let session = try signedIn.json(SignedIn.self).session.token
            #expect(try await client.get("/api/user/me", token: session).status == .ok)
            // The same assertion again: its challenge is used.
            #expect(try await client.post("/api/auth/passkeys/sign-in/verify", json: body).status == .badRequest)
            // A clone: a counter that does not move on is refused, and audited.
            var clone = device
            let (cloned, _) = try await Self.signIn(client, &clone)
            #expect(cloned.status == .unauthorized)
            #expect(try cloned.problem().code == "invalid_credentials")
            #expect(try await app.rows("SELECT id FROM audit_log WHERE action = 'passkey_counter_replayed'").count == 1)
            // Another origin, another relying party id, another account's user handle, an unknown credential.
            var evil = phone
            evil.origin = "https://evil.example.net"
            #expect(try await Self.signIn(client, &evil).0.status == .badRequest)
            var elsewhere = phone
            elsewhere.rpID = "evil.example.net"
            #expect(try await Self.signIn(client, &elsewhere).0.status == .badRequest)
            var stranger = try SoftAuthenticator(rpID: "example.com", origin: "https://example.com", userHandle: [1])
            let unknown = try await Self.signIn(client, &stranger).0
            #expect(unknown.status == .unauthorized)
            var unverifiedUser = phone
            unverifiedUser.flags = 0x01
            #expect(try await Self.signIn(client, &unverifiedUser).0.status == .unauthorized)
            // Malformed bytes: 400 problems, never a 5xx.
            for bad in [
                #"{"type":"public-key","response":{"clientDataJSON":"e30","attestationObject":"_w"}}"#,
                #"{"type":"public-key","response":{"clientDataJSON":"%%%","attestationObject":"oA"}}"#,
                #"{"type":"public-key","response":{"clientDataJSON":"","attestationObject":""}}"#,
            ] {
                let answer = try await client.send(.post, "/api/auth/passkeys/register/verify", token: token, json: bad)
                #expect(answer.status == .badRequest && answer.headers[.contentType] == "application/problem+json", "\(bad)")
            }
            let garbage = try await client.post(
                "/api/auth/passkeys/sign-in/verify",
                json: #"{"id":"AQ","type":"public-key","response":{"clientDataJSON":"AQ","authenticatorData":"AQ","signature":"AQ"}}"#)
            #expect(garbage.status == .badRequest)

            let listed = try await client.get("/api/auth/passkeys", token: token).json(Listed.self)
            #expect(listed.passkeys.count == 1 && listed.passkeys[0].lastUsedAt != nil && listed.passkeys[0].backedUp)
            let renamed = try await client.send(
                .patch, "/api/auth/passkeys/\(device.credentialIDText)", token: token, json: #"{"name":"Work phone"}"#)
            #expect(try renamed.json(Created.self).passkey.name == "Work phone")
            #expect(try await app.rows("SELECT credential_id FROM passkeys WHERE public_key LIKE '%correct%'").isEmpty)
        }
    }

    @Test(arguments: Engine.allCases)
    func bothFactorsVerifiedAddressesAndTheLastWayIn(engine: Engine) async throws {
        try await TestApp.run(engine, configure: Self.configure) { client, app in
            let token = try await client.signUpAndVerify(app, email: "two@example.com")
            let userID = try await app.userID(token: token)
            let (created, registered) = try await Self.register(client, token: token, algorithm: .rs256, name: "YubiKey")
            var rsa = registered
            #expect(created.status == .created)
            let (_, second) = try await Self.register(client, token: token)
            // Two-factor codes on: a password sign-in asks for a code, a passkey sign-in does not.
            try await app.write(
                "INSERT INTO totp_factors (user_id, secret_sealed, enabled_at_ms, last_step, created_at_ms) VALUES (?, 'x', 1, 0, 1)", [userID])
            #expect(String(buffer: try await client.signIn("two@example.com", "correct horse battery").body).contains("mfaRequired"))
            let (passkey, _) = try await Self.signIn(client, &rsa)
            #expect(passkey.status == .ok && String(buffer: passkey.body).contains("\"session\""), "\(String(buffer: passkey.body))")
            // An unverified address signs in with no passkey.
            try await app.write("UPDATE users SET email_verified = ? WHERE id = ?", [false, userID])
            let unverified = try await Self.signIn(client, &rsa).0
            #expect(unverified.status == .forbidden)
            #expect(try unverified.problem().code == "email_not_verified")
            try await app.write("UPDATE users SET email_verified = ? WHERE id = ?", [true, userID])
            // Without a password, the passkeys are the ways in: one may go, the last may not.
            try await app.write("UPDATE users SET password_hash = NULL WHERE id = ?", [userID])
            #expect(try await client.send(.delete, "/api/auth/passkeys/\(rsa.credentialIDText)", token: token).status == .noContent)
            let last = try await client.send(.delete, "/api/auth/passkeys/\(second.credentialIDText)", token: token)
            #expect(last.status == .conflict, "\(String(buffer: last.body))")
            #expect(try await client.send(.delete, "/api/auth/passkeys/\(rsa.credentialIDText)", token: token).status == .notFound)
            // A removed passkey signs in no more (one in flight meanwhile finds its row gone when it moves the counter on).
            #expect(try await Self.signIn(client, &rsa).0.status == .unauthorized)
            // Erasing the account forgets its passkeys.
            try await app.write("DELETE FROM totp_factors WHERE user_id = ?", [userID])
            #expect(try await client.send(.delete, "/api/user/me", token: token, json: #"{"password":""}"#).status == .noContent)
            #expect(try await app.rows("SELECT credential_id FROM passkeys").isEmpty)
        }
    }

    /// With two-factor codes on, the password alone does not buy a passkey (which signs in without a code).
    @Test(arguments: Engine.allCases)
    func withCodesOnAddingAPasskeyNeedsACode(engine: Engine) async throws {
        try await TestApp.run(engine, configure: Self.configure) { client, app in
            let token = try await client.signUpAndVerify(app, email: "codes@example.com")
            let setup = try await client.send(.post, "/api/auth/mfa/totp/setup", token: token, json: #"{"currentPassword":"correct horse battery"}"#)
                .json(EmailChangeAndMFAHTTPTests.Setup.self)
            let first = try EmailChangeAndMFAHTTPTests.code(setup.secret, at: app.clock.now())
            #expect(try await client.send(.post, "/api/auth/mfa/totp/enable", token: token, json: #"{"code":"\#(first)"}"#).status == .ok)
            let path = "/api/auth/passkeys/register/options"
            let passwordOnly = try await client.send(.post, path, token: token, json: #"{"currentPassword":"correct horse battery"}"#)
            #expect(passwordOnly.status == .forbidden)
            #expect(try passwordOnly.problem().code == "mfa_required")
            let wrong = try await client.send(.post, path, token: token, json: #"{"currentPassword":"correct horse battery","code":"000000"}"#)
            #expect(wrong.status == .badRequest)
            app.clock.advance(seconds: 30)
            let next = try EmailChangeAndMFAHTTPTests.code(setup.secret, at: app.clock.now())
            let ok = try await client.send(.post, path, token: token, json: #"{"currentPassword":"correct horse battery","code":"\#(next)"}"#)
            #expect(ok.status == .ok, "\(String(buffer: ok.body))")
            // The code is used up: the same one again is refused.
            #expect(
                try await client.send(.post, path, token: token, json: #"{"currentPassword":"correct horse battery","code":"\#(next)"}"#).status
                    == .badRequest)
        }
    }

    /// Options asked for before two-factor codes were turned on (so without a code) buy no passkey once they are on:
    /// whoever held the session and password then must show a code too, as the options would now ask.
    @Test(arguments: Engine.allCases)
    func optionsFromBeforeCodesWereOnBuyNoPasskey(engine: Engine) async throws {
        try await TestApp.run(engine, configure: Self.configure) { client, app in
            let token = try await client.signUpAndVerify(app, email: "early@example.com")
            let options = try await client.send(
                .post, "/api/auth/passkeys/register/options", token: token, json: #"{"currentPassword":"correct horse battery"}"#)
            let parsed = try options.json(CreationOptions.self)
            app.clock.advance(seconds: 5)
            let setup = try await client.send(.post, "/api/auth/mfa/totp/setup", token: token, json: #"{"currentPassword":"correct horse battery"}"#)
                .json(EmailChangeAndMFAHTTPTests.Setup.self)
            let first = try EmailChangeAndMFAHTTPTests.code(setup.secret, at: app.clock.now())
            #expect(try await client.send(.post, "/api/auth/mfa/totp/enable", token: token, json: #"{"code":"\#(first)"}"#).status == .ok)
            app.clock.advance(seconds: 5)
            let device = try SoftAuthenticator(
                rpID: parsed.rp.id, origin: "https://example.com", userHandle: try #require(Base64URL.decode(parsed.user.id, bytesMax: 64)))
            let answer = try await client.send(
                .post, "/api/auth/passkeys/register/verify", token: token, json: try Self.json(try device.registration(challenge: parsed.challenge)))
            #expect(try answer.status == .forbidden && answer.problem().code == "mfa_required", "\(String(buffer: answer.body))")
            #expect(try await app.rows("SELECT credential_id FROM passkeys").isEmpty)
        }
    }

    /// Anyone who knows the address can lock its password checks (an outside tester did, honouring the delays); the
    /// owner's passkey, which cannot be guessed, still signs in.
    @Test(arguments: Engine.allCases)
    func aLockedPasswordDoesNotLockThePasskey(engine: Engine) async throws {
        try await TestApp.run(engine, configure: Self.configure) { client, app in
            let token = try await client.signUpAndVerify(app, email: "locked@example.com")
            var (created, device) = try await Self.register(client, token: token)
            #expect(created.status == .created)
            for _ in 0..<10 {
                app.clock.advance(seconds: 20)
                #expect(try await client.signIn("locked@example.com", "wrong password!!").status == .unauthorized)
            }
            let locked = try await client.signIn("locked@example.com", "correct horse battery")
            #expect(try locked.status == .tooManyRequests && locked.problem().code == "account_locked")
            let (signedIn, _) = try await Self.signIn(client, &device)
            #expect(signedIn.status == .ok, "\(String(buffer: signedIn.body))")
            #expect(try await client.signIn("locked@example.com", "correct horse battery").status == .tooManyRequests, "the password stays locked")
        }
    }

    /// Whoever saw a credential id (it travels in every assertion) can send wrong signatures naming it; that neither
    /// locks the passkey nor mails its owner (the credential's own budget used to, after ten), while the network's
    /// failures still count.
    @Test(arguments: Engine.allCases)
    func wrongSignaturesNamingAPasskeyDoNotLockIt(engine: Engine) async throws {
        try await TestApp.run(engine, configure: Self.configure) { client, app in
            let token = try await client.signUpAndVerify(app, email: "seen@example.com")
            var (created, device) = try await Self.register(client, token: token)
            #expect(created.status == .created)
            let mailsBefore = try await app.mails(to: "seen@example.com").count
            for _ in 0..<15 {
                app.clock.advance(seconds: 20)
                let challenge = try await client.post("/api/auth/passkeys/sign-in/options", json: "").json(RequestOptions.self).challenge
                var copy = device
                var body = try copy.assertion(challenge: challenge)
                var response = try #require(body["response"] as? [String: String])
                response["signature"] = "MEUCIQDHu7QmJ9P3bNw4b1rJp1bAr0z3ZpA6hM8rb9xYmvq9MAIgJm0c5mWqC2x0qk1nT3U6qJ7Q9Xm8l8QyVvR8bD6cYx0"
                body["response"] = response
                let answer = try await client.post("/api/auth/passkeys/sign-in/verify", json: try Self.json(body))
                #expect(try answer.status == .unauthorized && answer.problem().code == "invalid_credentials", "\(answer.status)")
            }
            let (signedIn, _) = try await Self.signIn(client, &device)
            #expect(signedIn.status == .ok, "\(String(buffer: signedIn.body))")
            #expect(try await app.mails(to: "seen@example.com").count == mailsBefore, "no lock mail")
            let failures = try await app.rows("SELECT budget_key FROM attempt_budgets WHERE budget_key LIKE 'signin-ip:%'")
            #expect(failures.count == 1, "the network's failures counted")
        }
    }

    /// A malformed or foreign answer gets the same answer whether its credential id is registered or not.
    @Test(arguments: Engine.allCases)
    func answersDoNotTellWhetherACredentialExists(engine: Engine) async throws {
        try await TestApp.run(engine, configure: Self.configure) { client, app in
            let token = try await client.signUpAndVerify(app, email: "oracle@example.com")
            let (created, device) = try await Self.register(client, token: token)
            #expect(created.status == .created)
            let stranger = try SoftAuthenticator(rpID: "example.com", origin: "https://example.com", userHandle: [1])
            for mangle in ["AAAAAAAAAAAAAA", String(repeating: "A", count: 50)] {
                var answers: [String] = []
                for id in [device.credentialIDText, stranger.credentialIDText] {
                    let challenge = try await client.post("/api/auth/passkeys/sign-in/options", json: "").json(RequestOptions.self).challenge
                    var phone = device
                    var body = try phone.assertion(challenge: challenge)
                    body["id"] = id
                    var response = try #require(body["response"] as? [String: String])
                    response["authenticatorData"] = mangle
                    response.removeValue(forKey: "userHandle")
                    body["response"] = response
                    let answer = try await client.post("/api/auth/passkeys/sign-in/verify", json: try Self.json(body))
                    answers.append("\(answer.status.code) \(try answer.problem().detail)")
                }
                #expect(answers[0] == answers[1] && answers[0].hasPrefix("400"), "\(answers)")
            }
        }
    }

    @Test(arguments: Engine.allCases)
    func offWithoutARelyingParty(engine: Engine) async throws {
        try await TestApp.run(engine) { client, _ in
            let answer = try await client.post("/api/auth/passkeys/sign-in/options", json: "")
            #expect(answer.status == .notFound)
            #expect(try answer.problem().detail.contains("WEBAUTHN_RP_ID"))
        }
    }
}

extension SoftAuthenticator {
    var credentialIDText: String { Self.b64(credentialID) }
}
