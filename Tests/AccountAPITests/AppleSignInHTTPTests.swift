import Auth
import Clock
import Crypto
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Storage
import Synchronization
import TestSupport
import Testing

@testable import AccountAPI

/// Sign in with Apple against our own RSA keys and a local JWKS server, on both engines.
@Suite("Sign in with Apple over HTTP")
struct AppleSignInHTTPTests {
    struct Answer: Decodable {
        let user: User; let session: Session; let created: Bool
        struct User: Decodable { let id: String; let email: String; let name: String; let emailVerified: Bool }
        struct Session: Decodable { let token: String }
    }
    struct NotificationAnswer: Decodable { let result: String }
    struct Identities: Decodable { let identities: [Identity]; struct Identity: Decodable { let provider: String; let email: String? } }

    static func apple(_ client: any TestClientProtocol, _ token: String, nonce: String? = nil, name: String? = nil) async throws -> TestResponse {
        var fields = [#""identityToken":"\#(token)""#]
        if let nonce { fields.append(#""nonce":"\#(nonce)""#) }
        if let name { fields.append(#""name":"\#(name)""#) }
        return try await client.post("/api/auth/apple", json: "{\(fields.joined(separator: ","))}")
    }

    @Test(arguments: Engine.allCases)
    func tokensAreCheckedAsAppleDocuments(engine: Engine) async throws {
        let apple = try AppleIdentityFixture()
        try await apple.run { jwks in
            try await TestApp.run(engine, configure: apple.configure(jwks)) { client, app in
                let now = app.clock.now()
                let claims = apple.claims(
                    sub: "001.apple.a", email: "ada@privaterelay.appleid.com", now: now, overrides: ["is_private_email": "true"])
                let first = try await Self.apple(client, try apple.token(claims), name: "Ada")
                #expect(first.status == .created, "\(String(buffer: first.body))")
                let made = try first.json(Answer.self)
                #expect(made.created && made.user.email == "ada@privaterelay.appleid.com" && made.user.emailVerified && made.user.name == "Ada")
                #expect(try await client.balance(made.session.token).totalTokens == 3)
                let again = try await Self.apple(client, try apple.token(claims))
                #expect(try again.status == .ok && again.json(Answer.self).user.id == made.user.id && !again.json(Answer.self).created)
                #expect(try await app.rows("SELECT id FROM family_profiles WHERE user_id = ?", [made.user.id]).count == 1)
                let methods = try await client.get("/api/auth/identities", token: made.session.token).json(Identities.self)
                #expect(methods.identities.map(\.provider) == ["apple"])
                // Every refusal is 401 invalid_identity_token and makes nothing.
                let other = try AppleIdentityFixture.newKey()
                let refused: [(String, String)] = [
                    ("aud", try apple.token(apple.claims(sub: "x1", email: "x1@example.com", now: now, overrides: ["aud": "com.other.app"]))),
                    ("iss", try apple.token(apple.claims(sub: "x2", email: "x2@example.com", now: now, overrides: ["iss": "https://evil.example"]))),
                    (
                        "exp",
                        try apple.token(
                            apple.claims(sub: "x3", email: "x3@example.com", now: now, overrides: ["exp": Int(now.timeIntervalSince1970) - 120]))
                    ),
                    ("signature", try apple.token(apple.claims(sub: "x4", email: "x4@example.com", now: now), key: other)),
                    ("HS256", try apple.token(apple.claims(sub: "x5", email: "x5@example.com", now: now), alg: "HS256")),
                    ("none", try apple.token(apple.claims(sub: "x6", email: "x6@example.com", now: now), alg: "none")),
                    ("kid", try apple.token(apple.claims(sub: "x7", email: "x7@example.com", now: now), kid: "unknown", key: other)),
                    ("garbage", "not.a.jwt"),
                ]
                for (what, token) in refused {
                    let response = try await Self.apple(client, token)
                    #expect(try response.status == .unauthorized && response.problem().code == "invalid_identity_token", "\(what)")
                }
                // The nonce: SHA-256 hex of the raw nonce the app sends.
                let hashed = SHA256.hash(data: Data("raw-nonce".utf8)).map { String(format: "%02x", $0) }.joined()
                let withNonce = try apple.token(apple.claims(sub: "001.apple.a", email: nil, now: now, overrides: ["nonce": hashed]))
                #expect(try await Self.apple(client, withNonce, nonce: "raw-nonce").status == .ok)
                #expect(try await Self.apple(client, withNonce, nonce: "other-nonce").status == .unauthorized)
                #expect(try await app.rows("SELECT id FROM users WHERE email LIKE 'x%@example.com'").isEmpty)
                // Apple rotates its key: an unknown kid refetches the set (at most once a minute).
                try apple.rotate(to: "apple-2")
                app.clock.advance(seconds: 61)
                let fetches = apple.fetches.withLock { $0 }
                #expect(try await Self.apple(client, try apple.token(claims)).status == .ok)
                #expect(apple.fetches.withLock { $0 } == fetches + 1)
                // Apple's keys down with nothing cached for the kid: 503, never an accept.
                apple.down.withLock { $0 = true }
                let unknown = try apple.token(apple.claims(sub: "y1", email: "y1@example.com", now: now), kid: "apple-3")
                #expect(try await Self.apple(client, unknown).status.code == 401)  // refetched less than a minute ago: not Apple's key
            }
        }
    }

    @Test(arguments: Engine.allCases)
    func anUnreachableKeySetIsUnavailableAndUnconfiguredIsNotFound(engine: Engine) async throws {
        let apple = try AppleIdentityFixture()
        try await apple.run { jwks in
            apple.down.withLock { $0 = true }
            try await TestApp.run(engine, configure: apple.configure(jwks)) { client, app in
                let response = try await Self.apple(client, try apple.token(apple.claims(sub: "z", email: "z@example.com", now: app.clock.now())))
                #expect(try response.status == .serviceUnavailable && response.problem().code == "unavailable")
                #expect(try await app.rows("SELECT id FROM users").isEmpty)
            }
        }
        try await TestApp.run(engine) { client, _ in
            let off = try await Self.apple(client, "a.b.c")
            #expect(off.status == .notFound)
        }
    }

    @Test(arguments: Engine.allCases)
    func accountsLinkOnlyToVerifiedAddressesAndNotificationsApply(engine: Engine) async throws {
        let apple = try AppleIdentityFixture()
        try await apple.run { jwks in
            try await TestApp.run(engine, configure: apple.configure(jwks)) { client, app in
                let now = app.clock.now()
                // A verified email+password account with the same address: linked, and its owner is told.
                let token = try await client.signUpAndVerify(app, email: "grace@example.com")
                let userID = try await app.userID(token: token)
                let linked = try await Self.apple(client, try apple.token(apple.claims(sub: "001.grace", email: "grace@example.com", now: now)))
                #expect(try linked.status == .ok && linked.json(Answer.self).user.id == userID && !linked.json(Answer.self).created)
                #expect(try await app.mails(to: "grace@example.com").contains { $0.contains("Sign in with Apple was added") })
                let methods = try await client.get("/api/auth/identities", token: token).json(Identities.self)
                #expect(methods.identities.map(\.provider) == ["password", "apple"])
                #expect(try await client.balance(token).totalTokens == 3, "no second welcome grant")
                // Unlinking: with a password left it works; the last way in cannot be removed.
                #expect(
                    try await client.send(.delete, "/api/auth/identities/apple", token: token, json: #"{"currentPassword":"wrong wrong wrong"}"#)
                        .status == .forbidden)
                #expect(
                    try await client.send(.delete, "/api/auth/identities/apple", token: token, json: #"{"currentPassword":"correct horse battery"}"#)
                        .status == .noContent)
                #expect(try await client.get("/api/auth/identities", token: token).json(Identities.self).identities.map(\.provider) == ["password"])
                #expect(
                    try await client.send(.delete, "/api/auth/identities/apple", token: token, json: #"{"currentPassword":"correct horse battery"}"#)
                        .status == .notFound)
                // An unverified email in the token never links or creates.
                let unverified = try apple.token(
                    apple.claims(sub: "001.mallory", email: "grace@example.com", now: now, overrides: ["email_verified": "false"]))
                #expect(try await Self.apple(client, unverified).status == .badRequest)
                // An unfinished sign-up for an address: Apple's proof replaces it; the sign-up's password no longer works.
                _ = try await client.post("/api/auth/sign-up", json: #"{"email":"kate@example.com","password":"squatter password 1","name":"Sq"}"#)
                let kate = try await Self.apple(
                    client, try apple.token(apple.claims(sub: "001.kate", email: "kate@example.com", now: now)), name: "Kate")
                #expect(try kate.status == .created && kate.json(Answer.self).user.name == "Kate")
                #expect(try await client.signIn("kate@example.com", "squatter password 1").status == .unauthorized)
                // consent-revoked: the account's sessions end; account-delete: the account is erased.
                let kateToken = try kate.json(Answer.self).session.token
                let revocation = try apple.notification(type: "consent-revoked", sub: "001.kate", now: now)
                let revoked = try await client.post("/api/webhooks/apple/signin", json: #"{"payload":"\#(revocation)"}"#)
                #expect(revoked.status == .ok)
                #expect(try await client.get("/api/auth/session", token: kateToken).status == .unauthorized)
                app.clock.advance(seconds: 1)
                let again = try await Self.apple(client, try apple.token(apple.claims(sub: "001.kate", email: "kate@example.com", now: now)))
                // A replay of the revocation (same jti) changes nothing: the new session lives.
                let replay = try await client.post("/api/webhooks/apple/signin", json: #"{"payload":"\#(revocation)"}"#)
                #expect(try replay.json(NotificationAnswer.self).result == "already applied")
                #expect(try await client.get("/api/auth/session", token: again.json(Answer.self).session.token).status == .ok)
                let stale = try apple.notification(type: "consent-revoked", sub: "001.kate", now: now.addingTimeInterval(-4 * 86400))
                #expect(try await client.post("/api/webhooks/apple/signin", json: #"{"payload":"\#(stale)"}"#).status == .unauthorized)
                let deleted = try await client.post(
                    "/api/webhooks/apple/signin",
                    json: #"{"payload":"\#(try apple.notification(type: "account-delete", sub: "001.kate", now: now))"}"#)
                #expect(deleted.status == .ok)
                let kateID = try again.json(Answer.self).user.id
                #expect(try await app.rows("SELECT id FROM users WHERE id = ? AND deleted_at_ms IS NOT NULL", [kateID]).count == 1)
                let forged = try await client.post(
                    "/api/webhooks/apple/signin",
                    json:
                        #"{"payload":"\#(try apple.token(["iss": "https://appleid.apple.com", "aud": AppleIdentityFixture.clientID, "iat": 1, "events": "{}"], key: try AppleIdentityFixture.newKey()))"}"#
                )
                #expect(forged.status == .unauthorized)
                // An Apple-only account deletes itself after a recent sign-in, without a password.
                let solo = try await Self.apple(client, try apple.token(apple.claims(sub: "001.solo", email: "solo@example.com", now: now)))
                let soloToken = try solo.json(Answer.self).session.token
                let last = try await client.send(.delete, "/api/auth/identities/apple", token: soloToken)
                #expect(try last.status == .conflict && last.problem().detail.contains("only way in"))
                #expect(try await client.send(.delete, "/api/user/me", token: soloToken, json: #"{"password":""}"#).status == .noContent)
            }
        }
    }

    /// With two-factor codes on, Apple sign-in asks for a code too (Apple proves the Apple ID, not the second factor).
    @Test(arguments: Engine.allCases)
    func twoFactorCodesGuardAppleSignInToo(engine: Engine) async throws {
        let apple = try AppleIdentityFixture()
        try await apple.run { jwks in
            try await TestApp.run(engine, configure: apple.configure(jwks)) { client, app in
                let now = app.clock.now()
                let token = try await client.signUpAndVerify(app, email: "grace@example.com")
                let setup = try await client.send(
                    .post, "/api/auth/mfa/totp/setup", token: token, json: #"{"currentPassword":"correct horse battery"}"#)
                let secret = try #require(try setup.json([String: String].self)["secret"])
                let code = TOTP.code(secret: try #require(TOTP.base32Decode(secret)), step: TOTP.step(at: app.clock.now()))
                #expect(try await client.send(.post, "/api/auth/mfa/totp/enable", token: token, json: #"{"code":"\#(code)"}"#).status == .ok)
                let challenged = try await Self.apple(client, try apple.token(apple.claims(sub: "001.grace", email: "grace@example.com", now: now)))
                #expect(challenged.status == .ok && String(buffer: challenged.body).contains(#""mfaRequired":true"#))
                #expect(!String(buffer: challenged.body).contains(#""session""#))
            }
        }
    }
}
