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

/// A stolen operator session must not leave behind access that outlives it: an API key, a webhook endpoint (or a new
/// URL or events for one), a webhook secret. Those need a sign-in or a password confirmation within the last 10
/// minutes (`POST /api/auth/reauthenticate`, or the console form's password); an `admin` API key needs nothing more.
@Suite("Lasting access needs a recent authentication")
struct LastingAccessHTTPTests {
    static let password = "operator password"
    static let hook = #"{"url":"http://127.0.0.1:9/hook","events":["user.created"]}"#

    struct Created: Decodable { let id: String; let secret: String }
    struct Confirmed: Decodable { let recentUntil: String }

    /// Turns two-factor codes on for the session's account (its password given); returns the account's id and the secret.
    static func turnOnCodes(
        _ client: any TestClientProtocol, _ app: TestApp, token: String, password: String = "correct horse battery"
    ) async throws -> (id: String, secret: String) {
        let setup = try await client.send(.post, "/api/auth/mfa/totp/setup", token: token, json: #"{"currentPassword":"\#(password)"}"#)
            .json(EmailChangeAndMFAHTTPTests.Setup.self)
        let enable = #"{"code":"\#(try EmailChangeAndMFAHTTPTests.code(setup.secret, at: app.clock.now()))"}"#
        #expect(try await client.send(.post, "/api/auth/mfa/totp/enable", token: token, json: enable).status == .ok)
        return (try await app.userID(token: token), setup.secret)
    }

    @Test(arguments: Engine.allCases)
    func anOperatorsSessionMakesLastingAccessOnlyRightAfterShowingItsPassword(engine: Engine) async throws {
        try await TestApp.run(engine, configure: TestApp.webhookConfig) { client, app in
            _ = try await app.dependencies.auth.createAdmin(
                email: "ops@example.com", password: Self.password, name: "Ops", logger: TestDatabase.logger)
            let session = try await client.signIn("ops@example.com", Self.password).json(SeedSignInResponse.self).session.token
            let admin = try await app.apiKey(["admin"])
            // Just signed in: recent.
            #expect(
                try await client.send(.post, "/api/admin/api-keys", token: session, json: #"{"name":"a","scopes":["ledger:read"]}"#).status
                    == .created)
            let endpoint = try await client.send(.post, "/api/admin/webhooks", token: session, json: Self.hook).json(Created.self)
            // Eleven minutes later the same session reads and tidies, but makes nothing lasting.
            app.clock.advance(seconds: 11 * 60)
            func refused(_ response: TestResponse, _ what: String) throws {
                #expect(try response.status == .forbidden && response.problem().code == "reauthentication_required", "\(what)")
            }
            try refused(try await client.send(.post, "/api/admin/api-keys", token: session, json: #"{"name":"b","scopes":["admin"]}"#), "key")
            try refused(try await client.send(.post, "/api/admin/webhooks", token: session, json: Self.hook), "endpoint")
            let patch = "/api/admin/webhooks/\(endpoint.id)"
            try refused(try await client.send(.patch, patch, token: session, json: #"{"url":"http://127.0.0.1:8/elsewhere"}"#), "url")
            try refused(try await client.send(.patch, patch, token: session, json: #"{"events":["tokens.spent"]}"#), "events")
            try refused(try await client.send(.patch, patch, token: session, json: #"{"enabled":true}"#), "enable")
            try refused(try await client.send(.post, patch + "/rotate-secret", token: session), "rotate")
            let withCodes = try await Self.turnOnCodes(client, app, token: try await client.signUpAndVerify(app, email: "codes@example.com")).id
            let clear = "/api/admin/users/\(withCodes)/mfa"
            try refused(try await client.send(.delete, clear, token: session), "clear two-factor codes")
            #expect(try await app.rows("SELECT user_id FROM totp_factors WHERE user_id = ?", [withCodes]).count == 1)
            #expect(try await client.send(.patch, patch, token: session, json: #"{"description":"tidy","enabled":false}"#).status == .ok)
            #expect(try await client.get("/api/admin/api-keys", token: session).status == .ok)
            #expect(try await app.rows("SELECT id FROM api_keys").count == 2)
            // A key is a credential already.
            #expect(try await client.send(.post, patch + "/rotate-secret", token: admin).status == .ok)
            // A wrong password confirms nothing; the right one makes the session recent for ten minutes.
            let wrong = try await client.send(.post, "/api/auth/reauthenticate", token: session, json: #"{"password":"not it at all"}"#)
            #expect(try wrong.status == .forbidden && wrong.problem().code == "invalid_password")
            try refused(try await client.send(.post, "/api/admin/api-keys", token: session, json: #"{"name":"b","scopes":["admin"]}"#), "after wrong")
            let confirmed = try await client.send(.post, "/api/auth/reauthenticate", token: session, json: #"{"password":"\#(Self.password)"}"#)
            #expect(confirmed.status == .ok)
            #expect(try confirmed.json(Confirmed.self).recentUntil == ISODate.string(app.clock.now().addingTimeInterval(600)))
            #expect(try await client.send(.post, "/api/admin/api-keys", token: session, json: #"{"name":"b","scopes":["admin"]}"#).status == .created)
            #expect(try await client.send(.patch, patch, token: session, json: #"{"url":"http://127.0.0.1:8/elsewhere"}"#).status == .ok)
            #expect(try await client.send(.post, patch + "/rotate-secret", token: session).status == .ok)
            #expect(try await client.send(.delete, clear, token: session).status == .noContent)
            #expect(try await app.rows("SELECT user_id FROM totp_factors WHERE user_id = ?", [withCodes]).isEmpty)
            app.clock.advance(seconds: 10 * 60 + 1)
            try refused(try await client.send(.post, patch + "/rotate-secret", token: session), "rotate, later")
            #expect(try await app.rows("SELECT id FROM audit_log WHERE action = 'reauthenticated'").count == 1)
            // A user's own session may confirm too (PIN changes); a bad body is a 400, no session a 401.
            let user = try await client.signUpAndVerify(app, email: "user@example.com")
            #expect(
                try await client.send(.post, "/api/auth/reauthenticate", token: user, json: #"{"password":"correct horse battery"}"#).status == .ok)
            #expect(try await client.send(.post, "/api/auth/reauthenticate", token: user, json: #"{"pass":"x"}"#).status == .badRequest)
            #expect(try await client.send(.post, "/api/auth/reauthenticate", token: nil, json: #"{"password":"x"}"#).status == .unauthorized)
        }
    }

    /// The console's key and secret forms take the password when the sign-in is older than ten minutes.
    @Test(arguments: Engine.allCases)
    func theConsoleAsksForThePasswordBeforeMakingLastingAccess(engine: Engine) async throws {
        try await TestApp.run(
            engine,
            configure: {
                TestApp.webhookConfig(&$0); $0.consoleEnabled = true
            }
        ) { client, app in
            _ = try await app.dependencies.auth.createAdmin(email: "op@example.com", password: Self.password, name: "Op", logger: TestDatabase.logger)
            let signedIn = try await ConsoleHTTPTests.signIn(client, email: "op@example.com", password: Self.password)
            let cookie = try #require(ConsoleHTTPTests.cookie("console_session", in: signedIn)).value
            let csrf = ConsoleGate.csrfToken(session: cookie)
            func post(_ uri: String, _ fields: [String: String]) async throws -> TestResponse {
                try await client.execute(
                    uri: uri, method: .post, headers: [.contentType: "application/x-www-form-urlencoded", .cookie: "console_session=\(cookie)"],
                    body: ConsoleHTTPTests.form(fields.merging(["csrf": csrf]) { $1 }))
            }
            #expect(try await post("/console/keys", ["name": "fresh", "scopes": "ledger:read"]).status == .ok)
            app.clock.advance(seconds: 11 * 60)
            let stale = try await post("/console/keys", ["name": "stale", "scopes": "admin"])
            #expect(stale.status == .forbidden && String(buffer: stale.body).contains("enter your password"))
            let wrong = try await post("/console/keys", ["name": "stale", "scopes": "admin", "password": "not it at all"])
            #expect(wrong.status == .forbidden && String(buffer: wrong.body).contains("current password given is not correct"))
            #expect(try await app.rows("SELECT id FROM api_keys").count == 1)
            let made = try await post("/console/keys", ["name": "confirmed", "scopes": "admin", "password": Self.password])
            #expect(made.status == .ok && String(buffer: made.body).contains("ask_"))
            // The confirmation counts for the next forms too, until ten minutes have passed.
            let admin = try await app.apiKey(["admin"])
            let endpoint = try await client.send(.post, "/api/admin/webhooks", token: admin, json: Self.hook).json(Created.self)
            #expect(try await post("/console/webhooks/\(endpoint.id)/rotate-secret", [:]).status == .ok)
            app.clock.advance(seconds: 10 * 60 + 1)
            let secretBefore = try await app.rows("SELECT secret_sealed FROM webhook_endpoints").first?.string("secret_sealed")
            #expect(try await post("/console/webhooks/\(endpoint.id)/rotate-secret", [:]).status == .forbidden)
            #expect(try await app.rows("SELECT secret_sealed FROM webhook_endpoints").first?.string("secret_sealed") == secretBefore)
            #expect(try await post("/console/webhooks/\(endpoint.id)/rotate-secret", ["password": Self.password]).status == .ok)
            // While the sign-in or confirmation is recent, a filled-in password field (a password manager's) is not checked.
            #expect(try await post("/console/keys", ["name": "autofilled", "scopes": "ledger:read", "password": "stale autofill"]).status == .ok)
            // Clearing someone's codes, the same way.
            let member = try await Self.turnOnCodes(client, app, token: try await client.signUpAndVerify(app, email: "member@example.com")).id
            app.clock.advance(seconds: 10 * 60 + 1)
            let codes = "SELECT user_id FROM totp_factors WHERE user_id = ?"
            #expect(try await post("/console/users/\(member)/clear-mfa", [:]).status == .forbidden)
            #expect(try await app.rows(codes, [member]).count == 1)
            #expect(try await post("/console/users/\(member)/clear-mfa", ["password": Self.password]).status == .ok)
            #expect(try await app.rows(codes, [member]).isEmpty)
        }
    }

    /// A confirmation asks what a sign-in asks: with two-factor codes on, a code too (its own budget); an over-long
    /// password is a 400 that spends nothing.
    @Test(arguments: Engine.allCases)
    func aConfirmationAsksForTheSecondFactorWhenItIsOn(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            _ = try await app.dependencies.auth.createAdmin(
                email: "ops@example.com", password: Self.password, name: "Ops", logger: TestDatabase.logger)
            let session = try await client.signIn("ops@example.com", Self.password).json(SeedSignInResponse.self).session.token
            let setup = try await Self.turnOnCodes(client, app, token: session, password: Self.password)
            let member = try await client.signUpAndVerify(app, email: "member@example.com")
            let memberID = try await app.userID(token: member)
            app.clock.advance(seconds: 11 * 60)
            let clear = "/api/admin/users/\(memberID)/mfa"
            #expect(try await client.send(.delete, clear, token: session).problem().code == "reauthentication_required")
            let passwordOnly = try await client.send(.post, "/api/auth/reauthenticate", token: session, json: #"{"password":"\#(Self.password)"}"#)
            #expect(try passwordOnly.status == .forbidden && passwordOnly.problem().code == "mfa_required")
            let wrongCode = try await client.send(
                .post, "/api/auth/reauthenticate", token: session, json: #"{"password":"\#(Self.password)","code":"000000"}"#)
            #expect(try wrongCode.status == .badRequest && wrongCode.problem().code == "invalid_otp")
            // Over-long passwords are refused before any check: twelve of them spend nothing (ten wrong ones would lock).
            let long = String(repeating: "x", count: 2000)
            for _ in 0..<12 {
                #expect(
                    try await client.send(.post, "/api/auth/reauthenticate", token: session, json: #"{"password":"\#(long)"}"#).status == .badRequest)
            }
            #expect(try await client.send(.delete, clear, token: session).problem().code == "reauthentication_required")
            // Changing the password asks for no code, so with codes on it does not make the session recent.
            let changed = #"{"currentPassword":"\#(Self.password)","newPassword":"another operator password"}"#
            #expect(try await client.send(.post, "/api/auth/change-password", token: session, json: changed).status == .ok)
            #expect(try await client.send(.delete, clear, token: session).problem().code == "reauthentication_required")
            let newPassword = "another operator password"
            let code = try EmailChangeAndMFAHTTPTests.code(setup.secret, at: app.clock.now())
            let confirmed = try await client.send(
                .post, "/api/auth/reauthenticate", token: session, json: #"{"password":"\#(newPassword)","code":"\#(code)"}"#)
            #expect(confirmed.status == .ok)
            // The member has no codes: 404 now that the operator may ask.
            #expect(try await client.send(.delete, clear, token: session).status == .notFound)
            // A code is used once: the same one again is refused.
            let replay = try await client.send(
                .post, "/api/auth/reauthenticate", token: session, json: #"{"password":"\#(newPassword)","code":"\#(code)"}"#)
            #expect(try replay.problem().code == "invalid_otp")
        }
    }
}
