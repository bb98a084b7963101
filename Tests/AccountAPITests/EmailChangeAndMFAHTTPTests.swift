import Auth
import Clock
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Storage
import TestSupport
import Testing

@testable import AccountAPI

/// Email change and two-factor codes (TOTP), end to end over HTTP on both engines.
@Suite("Email change and two-factor codes over HTTP")
struct EmailChangeAndMFAHTTPTests {
    struct Me: Decodable { let id: String; let email: String; let emailVerified: Bool }
    struct Setup: Decodable { let secret: String; let otpauthUrl: String }
    struct Enabled: Decodable { let recoveryCodes: [String] }
    struct Challenge: Decodable { let mfaRequired: Bool; let mfaToken: String }
    struct SignedIn: Decodable { let session: Session; struct Session: Decodable { let token: String } }

    @Test(arguments: Engine.allCases)
    func anEmailChangeNeedsThePasswordAndTheNewAddressesCode(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "old@example.com")
            let other = try await client.signIn("old@example.com", "correct horse battery").json(SignedIn.self).session.token
            let wrong = try await client.send(
                .post, "/api/user/email", token: token, json: #"{"newEmail":"new@example.com","currentPassword":"nope nope nope"}"#)
            #expect(try wrong.status == .forbidden && wrong.problem().code == "invalid_password")
            let asked = try await client.send(
                .post, "/api/user/email", token: token, json: #"{"newEmail":"New@Example.com","currentPassword":"correct horse battery"}"#)
            #expect(asked.status == .accepted)
            #expect(try await app.mails(to: "old@example.com").contains { $0.contains("asked to move it to another email address") })
            #expect(try await client.send(.post, "/api/user/email/verify", token: token, json: #"{"code":"000000"}"#).status == .badRequest)
            let code = try await app.lastCode(to: "new@example.com")
            // Only the session that asked finishes it: another of the account's sessions with the right code changes nothing.
            let elsewhere = try await client.send(.post, "/api/user/email/verify", token: other, json: #"{"code":"\#(code)"}"#)
            #expect(try elsewhere.status == .badRequest && elsewhere.problem().code == "invalid_otp")
            let done = try await client.send(.post, "/api/user/email/verify", token: token, json: #"{"code":"\#(code)"}"#)
            #expect(try done.status == .ok && done.json(Me.self).email == "new@example.com" && done.json(Me.self).emailVerified)
            #expect(try await client.get("/api/user/me", token: other).status == .unauthorized, "other sessions end")
            #expect(try await client.get("/api/user/me", token: token).status == .ok)
            #expect(try await client.signIn("new@example.com", "correct horse battery").status == .ok)
            #expect(try await client.signIn("old@example.com", "correct horse battery").status == .unauthorized)
            #expect(try await client.send(.post, "/api/user/email/verify", token: token, json: #"{"code":"\#(code)"}"#).status == .badRequest)
            // A taken address answers the same at first, and fails at verification for the owner who holds the code.
            _ = try await client.signUpAndVerify(app, email: "taken@example.com")
            app.clock.advance(seconds: 120)  // past the address's mail cooldown from its own sign-up
            let taken = try await client.send(
                .post, "/api/user/email", token: token, json: #"{"newEmail":"taken@example.com","currentPassword":"correct horse battery"}"#)
            #expect(taken.status == .accepted && String(buffer: taken.body) == String(buffer: asked.body))
            let refused = try await client.send(
                .post, "/api/user/email/verify", token: token, json: #"{"code":"\#(try await app.lastCode(to: "taken@example.com"))"}"#)
            #expect(try refused.status == .conflict && refused.problem().code == "already_exists")
            #expect(try await client.get("/api/user/me", token: token).json(Me.self).email == "new@example.com")
            #expect(try await app.rows("SELECT action FROM audit_log WHERE action = 'email_changed'").count == 1)
        }
    }

    /// Issue 33: an address somebody merely signed up with (pending) never blocks its mailbox's owner. An email change
    /// onto it succeeds with the code mailed there and releases the pending account; forgot/reset for a pending address
    /// does nothing and answers like an unknown one.
    @Test(arguments: Engine.allCases)
    func aPendingSignUpNeverBlocksTheMailboxOwner(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "owner@example.com")
            try await client.post("/api/auth/sign-up", json: #"{"email":"target@example.com","password":"attackers passphrase","name":"M"}"#)
            let pendingID = try #require(try await app.rows("SELECT id FROM users WHERE email = 'target@example.com'").first?.string("id"))
            // Reset of a pending address: same answer as an unknown one, no mail, and no code can reset it.
            let forPending = try await client.post("/api/auth/forgot-password", json: #"{"email":"target@example.com"}"#)
            let forUnknown = try await client.post("/api/auth/forgot-password", json: #"{"email":"nobody@example.com"}"#)
            #expect(forPending.status == forUnknown.status && forPending.text == forUnknown.text)
            #expect(try await app.mails(to: "target@example.com").filter { $0.contains("reset code") }.isEmpty)
            app.clock.advance(seconds: 61)
            let asked = try await client.send(
                .post, "/api/user/email", token: token, json: #"{"newEmail":"target@example.com","currentPassword":"correct horse battery"}"#)
            #expect(asked.status == .accepted)
            let code = try await app.lastCode(to: "target@example.com")
            let done = try await client.send(.post, "/api/user/email/verify", token: token, json: #"{"code":"\#(code)"}"#)
            #expect(done.status == .ok)
            #expect(try done.json(Me.self).email == "target@example.com")
            #expect(try await client.signIn("target@example.com", "correct horse battery").status == .ok)
            #expect(try await client.signIn("target@example.com", "attackers passphrase").status == .unauthorized)
            let released = try await app.rows("SELECT email, deleted_at_ms FROM users WHERE id = ?", [pendingID])
            #expect(released.first?.optionalString("email") == nil && released.first?.optionalInt("deleted_at_ms") != nil)
            #expect(try await app.rows("SELECT id FROM sign_up_requests WHERE email = 'target@example.com'").isEmpty)
        }
    }

    static func code(_ secret: String, at date: Date) throws -> String {
        TOTP.code(secret: try #require(TOTP.base32Decode(secret)), step: TOTP.step(at: date))
    }

    /// A password reset signs out everywhere: a two-factor sign-in begun with the old password cannot be finished, and
    /// sign-ins running in parallel with the reset leave no session that outlives it (each either committed first and was
    /// revoked, or found the new hash and got 401).
    @Test(arguments: Engine.allCases)
    func aPasswordResetEndsHalfDoneAndParallelSignIns(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "reset-race@example.com")
            let setup = try await client.send(.post, "/api/auth/mfa/totp/setup", token: token, json: #"{"currentPassword":"correct horse battery"}"#)
                .json(Setup.self)
            let first = try Self.code(setup.secret, at: app.clock.now())
            #expect(try await client.send(.post, "/api/auth/mfa/totp/enable", token: token, json: #"{"code":"\#(first)"}"#).status == .ok)
            let challenge = try await client.signIn("reset-race@example.com", "correct horse battery").json(Challenge.self)
            // Sign-ins with the old password race the reset; each that opened a challenge is remembered.
            try await client.post("/api/auth/forgot-password", json: #"{"email":"reset-race@example.com"}"#)
            let code = try await app.lastCode(to: "reset-race@example.com")
            let racing = (0..<6).map { _ in
                Task { try await client.signIn("reset-race@example.com", "correct horse battery") }
            }
            let reset = try await client.post(
                "/api/auth/reset-password", json: #"{"email":"reset-race@example.com","code":"\#(code)","newPassword":"a brand new passphrase"}"#)
            #expect(reset.status == .ok)
            var tokens = [challenge.mfaToken]
            for task in racing {
                let answer = try await task.value
                #expect([.ok, .unauthorized, .tooManyRequests].contains(answer.status), "\(answer.status)")
                if answer.status == .ok { tokens.append(try answer.json(Challenge.self).mfaToken) }
            }
            app.clock.advance(seconds: 30)
            let next = try Self.code(setup.secret, at: app.clock.now())
            for mfaToken in tokens {
                let finished = try await client.post("/api/auth/mfa/verify", json: #"{"mfaToken":"\#(mfaToken)","code":"\#(next)"}"#)
                #expect(finished.status == .unauthorized, "a challenge from the old password is ended by the reset")
            }
            #expect(try await client.get("/api/user/me", token: token).status == .unauthorized)
            let fresh = try await client.signIn("reset-race@example.com", "a brand new passphrase").json(Challenge.self)
            let done = try await client.post("/api/auth/mfa/verify", json: #"{"mfaToken":"\#(fresh.mfaToken)","code":"\#(next)"}"#)
            #expect(done.status == .ok)
        }
    }

    @Test(arguments: Engine.allCases)
    func totpGuardsSignInWithoutReplayAndRecoveryCodesWorkOnce(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "mfa@example.com")
            #expect(try await client.send(.post, "/api/auth/mfa/totp/setup", token: token).status == .forbidden, "the password first")
            let setup = try await client.send(.post, "/api/auth/mfa/totp/setup", token: token, json: #"{"currentPassword":"correct horse battery"}"#)
                .json(Setup.self)
            #expect(setup.otpauthUrl.hasPrefix("otpauth://totp/") && setup.otpauthUrl.contains("secret=\(setup.secret)"))
            #expect(
                try await app.rows("SELECT secret_sealed FROM totp_factors").allSatisfy {
                    !((try? $0.string("secret_sealed")) ?? "").contains(setup.secret)
                })
            #expect(try await client.send(.post, "/api/auth/mfa/totp/enable", token: token, json: #"{"code":"000000"}"#).status == .badRequest)
            let first = try Self.code(setup.secret, at: app.clock.now())
            let enabled = try await client.send(.post, "/api/auth/mfa/totp/enable", token: token, json: #"{"code":"\#(first)"}"#)
            #expect(enabled.status == .ok)
            let recovery = try enabled.json(Enabled.self).recoveryCodes
            #expect(recovery.count == 10 && Set(recovery).count == 10)
            // Sign-in now asks for the second factor; no session yet.
            let signIn = try await client.signIn("mfa@example.com", "correct horse battery")
            let challenge = try signIn.json(Challenge.self)
            #expect(signIn.status == .ok && challenge.mfaRequired && !String(buffer: signIn.body).contains("\"session\""))
            func verify(_ json: String) async throws -> TestResponse { try await client.post("/api/auth/mfa/verify", json: json) }
            // The code used to enable is refused again within its window (replay).
            #expect(try await verify(#"{"mfaToken":"\#(challenge.mfaToken)","code":"\#(first)"}"#).status == .badRequest)
            app.clock.advance(seconds: 30)
            let next = try Self.code(setup.secret, at: app.clock.now())
            let done = try await verify(#"{"mfaToken":"\#(challenge.mfaToken)","code":"\#(next)"}"#)
            #expect(done.status == .ok)
            #expect(try await client.get("/api/user/me", token: try done.json(SignedIn.self).session.token).status == .ok)
            app.clock.advance(seconds: 30)
            let later = try Self.code(setup.secret, at: app.clock.now())
            #expect(
                try await verify(#"{"mfaToken":"\#(challenge.mfaToken)","code":"\#(later)"}"#).status == .unauthorized, "a challenge is used once")
            // A recovery code works once.
            let second = try await client.signIn("mfa@example.com", "correct horse battery").json(Challenge.self)
            #expect(try await verify(#"{"mfaToken":"\#(second.mfaToken)","recoveryCode":"\#(recovery[0])"}"#).status == .ok)
            let third = try await client.signIn("mfa@example.com", "correct horse battery").json(Challenge.self)
            #expect(try await verify(#"{"mfaToken":"\#(third.mfaToken)","recoveryCode":"\#(recovery[0])"}"#).status == .badRequest)
            #expect(try await verify(#"{"mfaToken":"\#(third.mfaToken)","code":"1","recoveryCode":"x"}"#).status == .badRequest)
            // Parallel wrong codes draw on the password budget: they cannot all be checked.
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for i in 0..<20 {
                    group.addTask { try await verify(#"{"mfaToken":"\#(third.mfaToken)","code":"\#(String(format: "%06d", i))"}"#).status.code }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == 400 }.count <= 10 && statuses.contains(429), "\(statuses)")
            // A right password does not refill the second-factor budget: new challenges still meet 429.
            let fresh = try await client.signIn("mfa@example.com", "correct horse battery").json(Challenge.self)
            #expect(try await verify(#"{"mfaToken":"\#(fresh.mfaToken)","code":"000001"}"#).status.code == 429)
            // Turning it off needs the password and a factor.
            app.clock.advance(seconds: 3600)
            let off = try Self.code(setup.secret, at: app.clock.now())
            #expect(
                try await client.send(.delete, "/api/auth/mfa/totp", token: token, json: #"{"code":"\#(off)","currentPassword":"wrong wrong wrong"}"#)
                    .status == .forbidden)
            app.clock.advance(seconds: 3600)
            let offAgain = try Self.code(setup.secret, at: app.clock.now())
            let disabled = try await client.send(
                .delete, "/api/auth/mfa/totp", token: token, json: #"{"code":"\#(offAgain)","currentPassword":"correct horse battery"}"#)
            #expect(disabled.status == .noContent, "\(String(buffer: disabled.body))")
            #expect(try await client.signIn("mfa@example.com", "correct horse battery").json(SignedIn.self).session.token.isEmpty == false)
        }
    }

    @Test(arguments: Engine.allCases)
    func operatorsNeedASecondFactorWhenRequired(engine: Engine) async throws {
        try await TestApp.run(engine, configure: { $0.requireAdminMFA = true }) { client, app in
            _ = try await app.dependencies.auth.createAdmin(
                email: "ops@example.com", password: "correct horse battery", name: "Ops", logger: TestDatabase.logger)
            let session = try await client.signIn("ops@example.com", "correct horse battery").json(SignedIn.self).session.token
            let refused = try await client.get("/api/admin/users", token: session)
            #expect(try refused.status == .forbidden && refused.problem().code == "mfa_required")
            let setup = try await client.send(
                .post, "/api/auth/mfa/totp/setup", token: session, json: #"{"currentPassword":"correct horse battery"}"#
            ).json(Setup.self)
            let code = try Self.code(setup.secret, at: app.clock.now())
            #expect(try await client.send(.post, "/api/auth/mfa/totp/enable", token: session, json: #"{"code":"\#(code)"}"#).status == .ok)
            #expect(try await client.get("/api/admin/users", token: session).status == .ok, "enrolling in this session shows the factor")
            app.clock.advance(seconds: 30)
            let challenge = try await client.signIn("ops@example.com", "correct horse battery").json(Challenge.self)
            let signedIn = try await client.post(
                "/api/auth/mfa/verify", json: #"{"mfaToken":"\#(challenge.mfaToken)","code":"\#(try Self.code(setup.secret, at: app.clock.now()))"}"#)
            #expect(try await client.get("/api/admin/users", token: try signedIn.json(SignedIn.self).session.token).status == .ok)
            #expect(try await client.get("/api/admin/users", token: try await app.apiKey(["admin"])).status == .ok, "API keys are unaffected")
            // Support clears a user's codes (lost phone): audited, the user told, and the next sign-in needs only the password.
            let admin = try await app.apiKey(["admin"])
            let opsID = try await app.userID(token: session)
            #expect(try await client.send(.delete, "/api/admin/users/\(opsID)/mfa", token: admin).status == .noContent)
            #expect(try await client.send(.delete, "/api/admin/users/\(opsID)/mfa", token: admin).status == .notFound)
            #expect(try await app.mails(to: "ops@example.com").contains { $0.contains("Support turned off the two-factor codes") })
            #expect(try await client.signIn("ops@example.com", "correct horse battery").json(SignedIn.self).session.token.isEmpty == false)
        }
    }
}
