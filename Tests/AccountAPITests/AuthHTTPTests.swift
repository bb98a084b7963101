import Clock
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import NIOCore
import Storage
import TestSupport
import Testing

@testable import AccountAPI

@Suite("Accounts and sessions over HTTP")
struct AuthHTTPTests {
    static let password = "correct horse battery"

    @Test(arguments: TestDatabase.engines)
    func signUpVerifyAndSignIn(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let signUp = try await client.post(
                "/api/auth/sign-up", json: #"{"email":"  Ada@Example.COM ","password":"correct horse battery","name":" Ada "}"#)
            #expect(signUp.status == .ok)
            let body = try signUp.json(SeedSignUpResponse.self)
            #expect(body.success && body.requiresVerification)
            let stored = try await app.rows("SELECT email, email_verified, password_hash FROM users")
            #expect(stored.count == 1)
            #expect(try stored[0].string("email") == "ada@example.com")
            // The pending account has no password; the sign-up request holds it until its code is shown.
            #expect(stored[0].optionalString("password_hash") == nil)
            #expect(try stored[0].bool("email_verified") == false)
            let requests = try await app.rows("SELECT password_hash, code_hmac FROM sign_up_requests")
            #expect(requests.count == 1)
            #expect(try requests[0].string("password_hash").hasPrefix("$argon2id$v=19$"))

            let code = try await app.lastCode(to: "ada@example.com")
            let verify = try await client.post("/api/verify-otp", json: #"{"email":"ada@example.com","code":"\#(code)"}"#)
            #expect(verify.status == .ok)
            let verified = try verify.json(SeedVerifyOTPResponse.self)
            #expect(verified.success && verified.user?.emailVerified == true && verified.user?.name == "Ada")
            #expect(verified.welcomeTokens == 3)
            let token = try verify.json(SeedVerifyOTPResponseWithSession.self).session.token
            #expect(try await app.rows("SELECT amount_tokens FROM welcome_grants").map { try $0.int("amount_tokens") } == [3])

            // The verification session works and has the default profile selected.
            let session = try await client.get("/api/auth/session", token: token)
            #expect(session.status == .ok)
            // The Bearer scheme is case-insensitive and spaces around the token are ignored; other schemes are not sessions.
            for (header, expected) in [
                ("bearer \(token)", 200), ("BEARER  \(token)\t", 200), ("Basic \(token)", 401), ("Bearer", 401), ("Bearer   ", 401),
                ("Bearerx\(token)", 401),
            ] {
                let response = try await client.execute(uri: "/api/auth/session", method: .get, headers: [.authorization: header])
                #expect(Int(response.status.code) == expected, "\(header.prefix(9))")
                let snapshot = try await client.execute(uri: "/api/entitlements", method: .get, headers: [.authorization: header])
                #expect(Int(snapshot.status.code) == expected, "\(header.prefix(9))")
            }
            struct SessionBody: Decodable { let user: SeedUser; let selectedProfile: SeedFamilyProfile? }
            let current = try session.json(SessionBody.self)
            #expect(current.selectedProfile?.isDefault == true && current.selectedProfile?.name == "Ada")
            #expect(current.selectedProfile?.canMakePurchases == true && current.selectedProfile?.hasPin == false)

            let signIn = try await client.signIn("ADA@example.com", Self.password)
            #expect(signIn.status == .ok)
            let signedIn = try signIn.json(SeedSignInResponse.self)
            #expect(signedIn.user.email == "ada@example.com" && signedIn.user.role == "user")
            #expect(signedIn.session.token.count == 43)  // 32 bytes, base64url without padding
            #expect(try await client.get("/api/user/me", token: signedIn.session.token).json(SeedUser.self).id == signedIn.user.id)

            // A code works once; sending it again says so (only its holder can learn that).
            let again = try await client.post("/api/verify-otp", json: #"{"email":"ada@example.com","code":"\#(code)"}"#)
            #expect(again.status == .conflict)
            #expect(try again.problem().code == "otp_already_used")
            #expect(try await app.rows("SELECT user_id FROM welcome_grants").count == 1)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func signUpAnswersAreIdenticalForTakenAddresses(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            _ = try await client.signUpAndVerify(app, email: "taken@example.com")
            app.clock.advance(seconds: 120)
            let taken = try await client.post("/api/auth/sign-up", json: #"{"email":"taken@example.com","password":"another long pass","name":"X"}"#)
            let fresh = try await client.post("/api/auth/sign-up", json: #"{"email":"fresh@example.com","password":"another long pass","name":"X"}"#)
            #expect(taken.status == fresh.status)
            #expect(taken.text == fresh.text)
            // The owner is told, but gets no code; the password did not change.
            let notice = try #require(try await app.mails(to: "taken@example.com").last)
            #expect(notice.contains("Someone tried to sign up") && !notice.contains(" code is "))
            #expect(try await client.signIn("taken@example.com", Self.password).status == .ok)

            // Sign-in: wrong password and unknown address answer byte for byte the same.
            let wrong = try await client.signIn("taken@example.com", "wrong password here")
            let unknown = try await client.signIn("nobody@example.com", "wrong password here")
            #expect(wrong.status == .unauthorized && unknown.status == .unauthorized)
            #expect(wrong.text == unknown.text)
            #expect(try wrong.problem().code == "invalid_credentials")

            // Forgot-password and resend answer the same for known and unknown addresses.
            app.clock.advance(seconds: 120)
            let forgotKnown = try await client.post("/api/auth/forgot-password", json: #"{"email":"taken@example.com"}"#)
            let forgotUnknown = try await client.post("/api/auth/forgot-password", json: #"{"email":"ghost@example.com"}"#)
            #expect(forgotKnown.status == .ok && forgotKnown.text == forgotUnknown.text)
            let resendKnown = try await client.post("/api/auth/resend-otp", json: #"{"email":"fresh@example.com"}"#)
            let resendUnknown = try await client.post("/api/auth/resend-otp", json: #"{"email":"ghost2@example.com"}"#)
            #expect(resendKnown.status == .ok && resendKnown.text == resendUnknown.text)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func fiveWrongCodesBurnTheCode(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            try await client.post("/api/auth/sign-up", json: #"{"email":"b@example.com","password":"correct horse battery","name":"B"}"#)
            let code = try await app.lastCode(to: "b@example.com")
            let wrongCode = code == "000000" ? "111111" : "000000"
            for remaining in [4, 3, 2, 1] {
                let r = try await client.post("/api/verify-otp", json: #"{"email":"b@example.com","code":"\#(wrongCode)"}"#)
                #expect(r.status == .badRequest)
                struct Remaining: Decodable { let code: String; let attemptsRemaining: Int }
                #expect(try r.json(Remaining.self).attemptsRemaining == remaining)
            }
            let fifth = try await client.post("/api/verify-otp", json: #"{"email":"b@example.com","code":"\#(wrongCode)"}"#)
            #expect(fifth.status == .tooManyRequests)
            #expect(try fifth.problem().code == "too_many_attempts")
            #expect(fifth.headers[.retryAfter] != nil)
            let right = try await client.post("/api/verify-otp", json: #"{"email":"b@example.com","code":"\#(code)"}"#)
            #expect(right.status == .tooManyRequests)
            #expect(try right.problem().code == "too_many_attempts")
            #expect(try await app.rows("SELECT email_verified FROM users").first?.bool("email_verified") == false)
            // A new code (after the cooldown) works.
            app.clock.advance(seconds: 61)
            #expect(try await client.post("/api/auth/resend-otp", json: #"{"email":"b@example.com"}"#).status == .ok)
            let fresh = try await app.lastCode(to: "b@example.com")
            #expect(try await client.post("/api/verify-otp", json: #"{"email":"b@example.com","code":"\#(fresh)"}"#).status == .ok)
        }
    }

    /// Fresh attempts come only with a fresh code: with two live sign-up requests a resend renews neither and mails
    /// nothing, so it gives the codes already mailed no attempts back (it once did, for another four guesses a time).
    @Test(arguments: TestDatabase.engines)
    func aResendThatMailsNothingGivesNoAttemptsBack(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let signUp = #"{"email":"twice-pending@example.com","password":"correct horse battery","name":"T"}"#
            try await client.post("/api/auth/sign-up", json: signUp)
            app.clock.advance(seconds: 61)
            try await client.post("/api/auth/sign-up", json: signUp)
            let code = try await app.lastCode(to: "twice-pending@example.com")
            let wrongCode = code == "000000" ? "111111" : "000000"
            let guess = #"{"email":"twice-pending@example.com","code":"\#(wrongCode)"}"#
            for _ in 0..<4 { #expect(try await client.post("/api/verify-otp", json: guess).status == .badRequest) }
            app.clock.advance(seconds: 61)
            let mailsBefore = try await app.mails(to: "twice-pending@example.com").count
            #expect(try await client.post("/api/auth/resend-otp", json: #"{"email":"twice-pending@example.com"}"#).status == .ok)
            #expect(try await app.mails(to: "twice-pending@example.com").count == mailsBefore, "nothing renewed, nothing mailed")
            let fifth = try await client.post("/api/verify-otp", json: guess)
            #expect(try fifth.status == .tooManyRequests && fifth.problem().code == "too_many_attempts")
        }
    }

    @Test(arguments: TestDatabase.engines)
    func codesExpireAfterTenMinutes(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            try await client.post("/api/auth/sign-up", json: #"{"email":"c@example.com","password":"correct horse battery","name":"C"}"#)
            let code = try await app.lastCode(to: "c@example.com")
            app.clock.advance(seconds: 600)
            let r = try await client.post("/api/verify-otp", json: #"{"email":"c@example.com","code":"\#(code)"}"#)
            #expect(r.status == .badRequest)
            #expect(try r.problem().code == "otp_expired")
        }
    }

    @Test(arguments: TestDatabase.engines)
    func resendHasACooldownAndAnHourlyBudget(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            try await client.post("/api/auth/sign-up", json: #"{"email":"d@example.com","password":"correct horse battery","name":"D"}"#)
            let tooSoon = try await client.post("/api/auth/resend-otp", json: #"{"email":"d@example.com"}"#)
            #expect(tooSoon.status == .tooManyRequests)
            #expect(try tooSoon.problem().code == "rate_limited")
            #expect(tooSoon.headers[.retryAfter] == "60")
            // Sign-up counted as the first send; four resends fill the hour's budget of five.
            for _ in 0..<4 {
                app.clock.advance(seconds: 61)
                #expect(try await client.post("/api/auth/resend-otp", json: #"{"email":"d@example.com"}"#).status == .ok)
            }
            #expect(try await app.mails(to: "d@example.com").count == 5)
            app.clock.advance(seconds: 61)
            let exhausted = try await client.post("/api/auth/resend-otp", json: #"{"email":"d@example.com"}"#)
            #expect(exhausted.status == .tooManyRequests)
            let retry = try #require(Int(exhausted.headers[.retryAfter] ?? ""))
            #expect(retry > 60 && retry <= 3600 - 5 * 61 + 61)
            // A repeated sign-up inside the budget does not send either, and says so (429 with the same wait; it is stored).
            let repeated = try await client.post(
                "/api/auth/sign-up", json: #"{"email":"d@example.com","password":"correct horse battery","name":"D"}"#)
            #expect(repeated.status == .tooManyRequests && repeated.headers[.retryAfter] == exhausted.headers[.retryAfter])
            #expect(try await app.mails(to: "d@example.com").count == 5)
            // The window ends: sends are possible again. With two sign-ups for the address resend mints no code (it cannot
            // say whose the caller is); a sign-up mails its own, which works.
            app.clock.advance(seconds: Double(retry))
            #expect(try await client.post("/api/auth/resend-otp", json: #"{"email":"d@example.com"}"#).status == .ok)
            #expect(try await app.mails(to: "d@example.com").count == 5)
            app.clock.advance(seconds: 61)
            try await client.post("/api/auth/sign-up", json: #"{"email":"d@example.com","password":"correct horse battery","name":"D"}"#)
            let code = try await app.lastCode(to: "d@example.com")
            #expect(try await client.post("/api/verify-otp", json: #"{"email":"d@example.com","code":"\#(code)"}"#).status == .ok)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func failedSignInsSlowDownThenLockAndResetLifts(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            _ = try await client.signUpAndVerify(app, email: "e@example.com")
            for _ in 0..<4 { #expect(try await client.signIn("e@example.com", "wrong password!!").status == .unauthorized) }
            #expect(try await client.signIn("e@example.com", "wrong password!!").status == .unauthorized)  // fifth: delays start
            let delayed = try await client.signIn("e@example.com", Self.password)
            #expect(delayed.status == .tooManyRequests)
            #expect(try delayed.problem().code == "rate_limited")
            #expect(delayed.headers[.retryAfter] == "1")
            for _ in 5..<10 {
                app.clock.advance(seconds: 20)
                #expect(try await client.signIn("e@example.com", "wrong password!!").status == .unauthorized)
            }
            app.clock.advance(seconds: 60)
            // Ten consecutive failures: locked, and the right password does not bypass it.
            let locked = try await client.signIn("e@example.com", Self.password)
            #expect(locked.status == .tooManyRequests)
            #expect(try locked.problem().code == "account_locked")
            let retryAfter = try #require(Int(locked.headers[.retryAfter] ?? ""))
            #expect(retryAfter > 700 && retryAfter <= 900)
            #expect(try await app.rows("SELECT action FROM audit_log WHERE action = 'account_locked'").count == 1)
            #expect(try await app.mails(to: "e@example.com").contains { $0.contains("locked") })
            // A password reset lifts the lock.
            try await client.post("/api/auth/forgot-password", json: #"{"email":"e@example.com"}"#)
            let code = try await app.lastCode(to: "e@example.com")
            let reset = try await client.post(
                "/api/auth/reset-password", json: #"{"email":"e@example.com","code":"\#(code)","newPassword":"a brand new passphrase"}"#)
            #expect(reset.status == .ok)
            #expect(try await client.signIn("e@example.com", "a brand new passphrase").status == .ok)
        }
    }

    /// One mailbox, one account: an address typed composed or decomposed is one address, and look-alike spellings that
    /// would be another account (full-width letters, a domain not in its ASCII form) are refused.
    @Test(arguments: TestDatabase.engines)
    func oneAddressHasOneSpelling(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let decomposed = #"bo\u0308b@example.com"#, composed = "b\u{00F6}b@example.com"
            #expect(
                try await client.post("/api/auth/sign-up", json: #"{"email":"\#(decomposed)","password":"\#(Self.password)","name":"B"}"#).status
                    == .ok)
            let code = try await app.lastCode(to: composed)
            #expect(try await client.post("/api/verify-otp", json: #"{"email":"\#(composed)","code":"\#(code)"}"#).status == .ok)
            #expect(try await client.signIn(decomposed, Self.password).status == .ok)
            let again = try await client.post("/api/auth/sign-up", json: #"{"email":"\#(composed)","password":"another passphrase","name":"C"}"#)
            #expect(again.status == .ok || again.status == .tooManyRequests, "\(again.status)")
            #expect(try await app.rows("SELECT id FROM users WHERE email = ?", [composed]).count == 1)
            #expect(try await app.rows("SELECT id FROM users").count == 1)
            for lookalike in [#"\uff42ob@example.com"#, #"bob@ex\u00e4mple.com"#] {
                let refused = try await client.post(
                    "/api/auth/sign-up", json: #"{"email":"\#(lookalike)","password":"\#(Self.password)","name":"D"}"#)
                #expect(refused.status == .badRequest, "\(lookalike)")
            }
        }
    }

    @Test(arguments: TestDatabase.engines)
    func unverifiedAccountsLearnItOnlyWithTheRightPassword(engine: Engine) async throws {
        try await TestApp.run(engine) { client, _ in
            try await client.post("/api/auth/sign-up", json: #"{"email":"f@example.com","password":"correct horse battery","name":"F"}"#)
            #expect(try await client.signIn("f@example.com", "wrong password!!").problem().code == "invalid_credentials")
            let right = try await client.signIn("f@example.com", Self.password)
            #expect(right.status == .forbidden)
            #expect(try right.problem().code == "email_not_verified")
        }
    }

    @Test(arguments: TestDatabase.engines)
    func sessionsListRevokeAndSignOut(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let first = try await client.signUpAndVerify(app, email: "g@example.com")
            let second = try await client.signIn("g@example.com", Self.password, userAgent: "Other/2.0").json(SeedSignInResponse.self).session
            let otherUser = try await client.signUpAndVerify(app, email: "h@example.com")
            struct List: Decodable { struct Item: Decodable { let id: String; let current: Bool; let userAgent: String? }; let sessions: [Item] }
            let list = try await client.get("/api/auth/sessions", token: first).json(List.self)
            #expect(list.sessions.count == 2)
            #expect(list.sessions.filter(\.current).count == 1)
            #expect(list.sessions.contains { $0.id == second.id && !$0.current && $0.userAgent == "Other/2.0" })
            // Another account's session id is simply not found.
            #expect(try await client.send(.delete, "/api/auth/sessions/\(second.id)", token: otherUser).status == .notFound)
            #expect(try await client.send(.delete, "/api/auth/sessions/\(second.id)", token: first).status == .noContent)
            let revoked = try await client.get("/api/user/me", token: second.token)
            #expect(revoked.status == .unauthorized)
            #expect(try revoked.problem().code == "unauthorized")
            #expect(revoked.headers[.wwwAuthenticate] == "Bearer")
            #expect(try await client.send(.post, "/api/auth/sign-out", token: first).status == .ok)
            #expect(try await client.get("/api/user/me", token: first).status == .unauthorized)
            #expect(try await client.get("/api/user/me", token: nil).status == .unauthorized)
            #expect(try await client.get("/api/user/me", token: "not-a-token").status == .unauthorized)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func sessionsExpireWhenIdleAndAbsolutely(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "i@example.com")
            // Sliding: used every 6 days, it lives on…
            for _ in 0..<4 {
                app.clock.advance(seconds: 6 * 86400)
                #expect(try await client.get("/api/user/me", token: token).status == .ok)
            }
            // …until the 30-day absolute limit.
            app.clock.advance(seconds: 6 * 86400 + 1)
            #expect(try await client.get("/api/user/me", token: token).status == .unauthorized)
            // Idle for 7 days: expired.
            let idle = try await client.signIn("i@example.com", Self.password).json(SeedSignInResponse.self).session.token
            app.clock.advance(seconds: 7 * 86400 + 1)
            #expect(try await client.get("/api/user/me", token: idle).status == .unauthorized)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func resetRevokesEverySessionAndChangeRevokesTheOthers(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let a = try await client.signUpAndVerify(app, email: "j@example.com")
            let b = try await client.signIn("j@example.com", Self.password).json(SeedSignInResponse.self).session.token
            let wrongCurrent = try await client.send(
                .post, "/api/auth/change-password", token: a, json: #"{"currentPassword":"nope nope nope","newPassword":"second long password"}"#)
            #expect(wrongCurrent.status == .forbidden, "a wrong current password is not a sign-out")
            #expect(try wrongCurrent.problem().code == "invalid_password")
            let weak = try await client.send(
                .post, "/api/auth/change-password", token: a, json: #"{"currentPassword":"correct horse battery","newPassword":"password123"}"#)
            #expect(weak.status == .badRequest)
            #expect(try weak.problem().detail.contains("too common"))
            let changed = try await client.send(
                .post, "/api/auth/change-password", token: a,
                json: #"{"currentPassword":"correct horse battery","newPassword":"second long password"}"#)
            #expect(changed.status == .ok)
            #expect(try await client.get("/api/user/me", token: a).status == .ok)
            #expect(try await client.get("/api/user/me", token: b).status == .unauthorized)
            #expect(try await app.mails(to: "j@example.com").last?.contains("password was changed") == true)

            app.clock.advance(seconds: 61)
            try await client.post("/api/auth/forgot-password", json: #"{"email":"j@example.com"}"#)
            let code = try await app.lastCode(to: "j@example.com")
            let badCode = try await client.post(
                "/api/auth/reset-password", json: #"{"email":"j@example.com","code":"12345","newPassword":"third long password"}"#)
            #expect(badCode.status == .badRequest)
            let reset = try await client.post(
                "/api/auth/reset-password", json: #"{"email":"j@example.com","code":"\#(code)","newPassword":"third long password"}"#)
            #expect(reset.status == .ok)
            #expect(try await client.get("/api/user/me", token: a).status == .unauthorized)
            #expect(try await client.signIn("j@example.com", "second long password").status == .unauthorized)
            #expect(try await client.signIn("j@example.com", "third long password").status == .ok)
            #expect(try await app.rows("SELECT action FROM audit_log WHERE action IN ('password_changed', 'password_reset')").count == 2)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func meCanBeReadUpdatedAndErased(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "k@example.com")
            let patched = try await client.send(.patch, "/api/user/me", token: token, json: #"{"name":"Katherine","promptEnhancementEnabled":false}"#)
            #expect(patched.status == .ok)
            let user = try patched.json(SeedUser.self)
            #expect(user.name == "Katherine" && user.promptEnhancementEnabled == false)
            #expect(try await client.send(.patch, "/api/user/me", token: token, json: #"{"name":"   "}"#).status == .badRequest)
            #expect(try await client.send(.patch, "/api/user/me", token: token, json: #"{"name":5}"#).status == .badRequest)
            #expect(try await client.send(.delete, "/api/user/me", token: token, json: #"{"password":"wrong password!!"}"#).status == .forbidden)
            #expect(try await client.send(.delete, "/api/user/me", token: token, json: #"{"password":"correct horse battery"}"#).status == .noContent)
            #expect(try await client.get("/api/user/me", token: token).status == .unauthorized)
            #expect(try await client.signIn("k@example.com", Self.password).status == .unauthorized)
            let erased = try await app.rows("SELECT email, name, password_hash, deleted_at_ms FROM users WHERE id = ?", [user.id])
            #expect(erased.first?.optionalString("email") == nil && erased.first?.optionalString("password_hash") == nil)
            #expect(try erased.first?.string("name") == "Deleted user")
            #expect(try await app.rows("SELECT id FROM family_profiles WHERE user_id = ?", [user.id]).isEmpty)
            #expect(try await app.rows("SELECT user_id FROM welcome_grants WHERE user_id = ?", [user.id]).count == 1)
            // The address is free again (after the mail cooldown).
            app.clock.advance(seconds: 61)
            _ = try await client.signUpAndVerify(app, email: "k@example.com")
        }
    }

    @Test(arguments: TestDatabase.engines)
    func newDevicesAreMailedAndConcurrentSignInsAllSucceed(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            _ = try await client.signUpAndVerify(app, email: "l@example.com")
            let before = try await app.mails(to: "l@example.com").count
            #expect(try await client.signIn("l@example.com", Self.password, userAgent: "").status == .ok)  // the verifying device
            #expect(try await app.mails(to: "l@example.com").count == before)
            #expect(try await client.signIn("l@example.com", Self.password, userAgent: "Stranger/9").status == .ok)
            #expect(try await app.mails(to: "l@example.com").last?.contains("New sign-in") == true)
            // Concurrent sign-ins each reserve a password check before Argon2 runs, so in-flight ones count toward the
            // delays: five at once (the free failures plus one) all succeed.
            let tokens = try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<5 {
                    group.addTask {
                        try await client.signIn("l@example.com", Self.password, userAgent: "Stranger/9").json(SeedSignInResponse.self).session.token
                    }
                }
                return try await group.reduce(into: Set<String>()) { $0.insert($1) }
            }
            #expect(tokens.count == 5)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func signUpValidatesItsInput(engine: Engine) async throws {
        try await TestApp.run(engine) { client, _ in
            for (body, fragment) in [
                (#"{"email":"not-an-email","password":"correct horse battery","name":"A"}"#, "valid email"),
                (#"{"email":"a@example.com","password":"short","name":"A"}"#, "at least 10"),
                (#"{"email":"a@example.com","password":"\#(String(repeating: "x", count: 129))","name":"A"}"#, "at most 128"),
                (#"{"email":"a@example.com","password":"qwertyuiop","name":"A"}"#, "too common"),
                (#"{"email":"a@example.com","password":"correct horse battery","name":""}"#, "Name"),
                (#"{"email":"a@example.com","password":"correct horse battery"}"#, "Missing field 'name'"),
            ] {
                let r = try await client.post("/api/auth/sign-up", json: body)
                #expect(r.status == .badRequest, "\(fragment)")
                #expect(try r.problem().detail.contains(fragment), "\(fragment)")
            }
        }
    }

    /// Whether `text` holds `secret`; a six-digit code counts only as a number of its own, not as six digits inside a longer
    /// one (a millisecond timestamp in a log line holds some code's digits by chance).
    static func mentions(_ text: String, _ secret: String) -> Bool {
        guard secret.allSatisfy(\.isNumber) else { return text.contains(secret) }
        var rest = text[...]
        while let range = rest.range(of: secret) {
            let before = range.lowerBound > rest.startIndex ? rest[rest.index(before: range.lowerBound)] : " "
            let after = range.upperBound < rest.endIndex ? rest[range.upperBound] : " "
            if !before.isNumber && !after.isNumber { return true }
            rest = rest[rest.index(after: range.lowerBound)...]
        }
        return false
    }

    /// Passwords, tokens and codes never reach the database or the logs in plain text.
    @Test(arguments: TestDatabase.engines)
    func noSecretInTheDatabaseOrTheLogs(engine: Engine) async throws {
        let logs = CapturedLogs()
        try await TestApp.run(engine, logger: logs.logger()) { client, app in
            let password = "Secret-Pass-\(UUID().uuidString.prefix(8))"
            try await client.post("/api/auth/sign-up", json: #"{"email":"m@example.com","password":"\#(password)","name":"M"}"#)
            let code = try await app.lastCode(to: "m@example.com")
            let verify = try await client.post("/api/verify-otp", json: #"{"email":"m@example.com","code":"\#(code)"}"#)
            let token = try verify.json(SeedVerifyOTPResponseWithSession.self).session.token
            let signIn = try await client.signIn("m@example.com", password).json(SeedSignInResponse.self).session.token
            _ = try await client.get("/api/auth/session", token: signIn)
            app.clock.advance(seconds: 61)
            try await client.post("/api/auth/forgot-password", json: #"{"email":"m@example.com"}"#)
            let resetCode = try await app.lastCode(to: "m@example.com")
            let secrets = [password, code, token, signIn, resetCode]
            var stored: [String] = []
            for table in ["users", "sessions", "otp_codes", "attempt_budgets", "known_devices", "family_profiles", "audit_log"] {
                for row in try await app.rows("SELECT * FROM \(table)") { stored.append(contentsOf: row.values.values.map { "\($0.debugText)" }) }
            }
            for secret in secrets {
                #expect(!stored.contains { Self.mentions($0, secret) }, "a secret is stored in plain text")
                #expect(!logs.all.contains { Self.mentions($0, secret) }, "a secret was logged")
            }
            if case .sqlite(let path) = app.dependencies.config.database {
                for file in [path, path + "-wal"] {
                    guard let data = FileManager.default.contents(atPath: file) else { continue }
                    for secret in secrets { #expect(data.range(of: Data(secret.utf8)) == nil, "secret found in \(file)") }
                }
            }
            #expect(logs.all.contains { $0.contains("request") }, "the access log ran")
        }
    }
}

extension SQLValue {
    /// Every stored value as text, to search for secrets.
    var debugText: String {
        switch self {
        case .text(let s): s
        case .bytes(let b): String(decoding: b, as: UTF8.self)
        default: description
        }
    }
}
