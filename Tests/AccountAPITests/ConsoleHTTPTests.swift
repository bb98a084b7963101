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

/// The operator console's door over HTTP (the pages themselves are driven in a browser by scripts/console-test): off by
/// default, its sessions in their own token domain, CSRF on every form, the API's attempt budgets, a short idle time.
@Suite("Operator console over HTTP")
struct ConsoleHTTPTests {
    static let password = "correct horse battery"
    static func enabled(_ config: inout AppConfig) { config.consoleEnabled = true }

    /// The value of cookie `name` in the response's `Set-Cookie` headers, and the whole header.
    static func cookie(_ name: String, in response: TestResponse) -> (value: String, header: String)? {
        for header in response.headers[values: .setCookie] where header.hasPrefix(name + "=") {
            return (String(header.dropFirst(name.count + 1).prefix(while: { $0 != ";" })), header)
        }
        return nil
    }

    static func form(_ fields: [String: String]) -> ByteBuffer {
        let allowed = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~"))
        return ByteBuffer(
            string: fields.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")" }
                .joined(separator: "&"))
    }

    /// Signs in through the console's form; returns the answer to the POST.
    static func signIn(_ client: any TestClientProtocol, email: String, password: String = password) async throws -> TestResponse {
        let page = try await client.execute(uri: "/console/sign-in", method: .get)
        let pre = cookie("console_sign_in", in: page)?.value ?? ""
        return try await client.execute(
            uri: "/console/sign-in", method: .post,
            headers: [.contentType: "application/x-www-form-urlencoded", .cookie: "console_sign_in=\(pre)"],
            body: form(["csrf": pre, "email": email, "password": password]))
    }

    @Test(arguments: Engine.allCases)
    func theConsoleIsOffUnlessEnabled(engine: Engine) async throws {
        try await TestApp.run(engine) { client, _ in
            let answer = try await client.execute(uri: "/console/sign-in", method: .get)
            #expect(answer.status == .notFound)
        }
    }

    @Test(arguments: Engine.allCases)
    func consoleSessionsAreTheirOwnAndFormsNeedTheirToken(engine: Engine) async throws {
        try await TestApp.run(engine, configure: Self.enabled) { client, app in
            _ = try await app.dependencies.auth.createAdmin(email: "op@example.com", password: Self.password, name: "Op", logger: TestDatabase.logger)
            let signedIn = try await Self.signIn(client, email: "op@example.com")
            #expect(signedIn.status == .seeOther && signedIn.headers[.location] == "/console/users")
            let session = try #require(Self.cookie("console_session", in: signedIn))
            #expect(session.header.contains("HttpOnly") && session.header.contains("SameSite=Strict") && session.header.contains("Path=/console"))
            let users = try await client.execute(uri: "/console/users", method: .get, headers: [.cookie: "console_session=\(session.value)"])
            #expect(users.status == .ok && String(buffer: users.body).contains("op@example.com"))
            #expect(users.headers[.contentSecurityPolicy]?.contains("frame-ancestors 'none'") == true)
            // The cookie is not an API token, and an API token is not a console cookie.
            #expect(try await client.get("/api/auth/session", token: session.value).status == .unauthorized)
            // Not with any prefix either: no bearer text hashes to a console session's stored hash.
            for bearer in ["console:" + session.value, "console:\(session.value)\u{0}", session.value.uppercased()] {
                #expect(try await client.get("/api/admin/users", token: bearer).status == .unauthorized)
            }
            let api = try await client.signIn("op@example.com", Self.password).json(SignInBody.self).session.token
            let refused = try await client.execute(uri: "/console/users", method: .get, headers: [.cookie: "console_session=\(api)"])
            #expect(refused.status == .seeOther && refused.headers[.location] == "/console/sign-in")
            // A form without the session's CSRF token, or with another one, changes nothing.
            let userID = try await app.userID(token: api)
            for csrf in [nil, "forged"] as [String?] {
                var fields = ["amount": "5", "bucket": "bonus", "idempotencyKey": "k-\(csrf ?? "none")"]
                fields["csrf"] = csrf
                let posted = try await client.execute(
                    uri: "/console/users/\(userID)/grant", method: .post,
                    headers: [.contentType: "application/x-www-form-urlencoded", .cookie: "console_session=\(session.value)"], body: Self.form(fields)
                )
                #expect(posted.status == .forbidden && String(buffer: posted.body).contains("CSRF"))
            }
            // The right token from another site's page is refused too: by its Origin, or, when a browser sends none, its Referer.
            let csrf = ConsoleGate.csrfToken(session: session.value)
            for (name, value) in [("Origin", "https://evil.example"), ("Referer", "https://evil.example/console/users"), ("Origin", "null")] {
                let posted = try await client.execute(
                    uri: "/console/users/\(userID)/grant", method: .post,
                    headers: [
                        .contentType: "application/x-www-form-urlencoded", .cookie: "console_session=\(session.value)",
                        try #require(HTTPField.Name(name)): value,
                    ],
                    body: Self.form(["amount": "5", "bucket": "bonus", "idempotencyKey": "k-\(name)-\(value)", "csrf": csrf]))
                #expect(posted.status == .forbidden && String(buffer: posted.body).contains("own pages"), "\(name): \(value)")
            }
            #expect(try await app.rows("SELECT id FROM ledger_transfers WHERE reason = 'admin_grant'").isEmpty)
            let huge = try await client.execute(
                uri: "/console/users/\(userID)/grant", method: .post,
                headers: [.contentType: "application/x-www-form-urlencoded", .cookie: "console_session=\(session.value)"],
                body: ByteBuffer(string: "csrf=" + String(repeating: "a", count: 70_000)))
            #expect(huge.status == .contentTooLarge && String(buffer: huge.body).contains("64 KiB"))
            // A sign-in form without its double-submit cookie is refused before any password check.
            let bare = try await client.execute(
                uri: "/console/sign-in", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
                body: Self.form(["csrf": "x", "email": "op@example.com", "password": Self.password]))
            #expect(bare.status == .forbidden)
            // Idle for longer than the console allows: back to the sign-in page.
            app.clock.advance(seconds: 16 * 60)
            let idle = try await client.execute(uri: "/console/users", method: .get, headers: [.cookie: "console_session=\(session.value)"])
            #expect(idle.status == .seeOther && idle.headers[.location] == "/console/sign-in")
        }
    }

    struct SignInBody: Decodable { let session: Session; struct Session: Decodable { let token: String } }

    @Test(arguments: Engine.allCases)
    func consoleSignInsSpendTheAPIsPasswordBudget(engine: Engine) async throws {
        let configure: @Sendable (inout AppConfig) -> Void = {
            Self.enabled(&$0)
            $0.authPolicy.ipHashesPerMinute = 1000
        }
        try await TestApp.run(engine, configure: configure) { client, app in
            _ = try await app.dependencies.auth.createAdmin(email: "op@example.com", password: Self.password, name: "Op", logger: TestDatabase.logger)
            let policy = app.dependencies.auth.policy
            for failures in 1...policy.passwordRule.limit {
                let wrong = try await Self.signIn(client, email: "op@example.com", password: "wrong password here")
                #expect(wrong.status == .unauthorized && String(buffer: wrong.body).contains("Operator sign-in"), "\(wrong.status)")
                app.clock.advance(seconds: policy.delaySeconds(afterFailures: failures) + 1)
            }
            #expect(try await client.signIn("op@example.com", Self.password).status == .tooManyRequests)
            #expect(try await Self.signIn(client, email: "op@example.com").status == .tooManyRequests)
            // A user who is not an operator is told so only after the right password.
            _ = try await client.signUpAndVerify(app, email: "user@example.com", password: Self.password)
            let user = try await Self.signIn(client, email: "user@example.com")
            #expect(user.status == .forbidden && String(buffer: user.body).contains("not an operator"))
            #expect(Self.cookie("console_session", in: user) == nil)
        }
    }

    struct History: Decodable { let entries: [Entry]; struct Entry: Decodable { let id: String; let amount: Int64 } }

    /// A user's page never acts on another user's entry: the reversal is checked in its own transaction.
    @Test(arguments: Engine.allCases)
    func aUsersPageNeverReversesAnotherUsersEntry(engine: Engine) async throws {
        try await TestApp.run(engine, configure: Self.enabled) { client, app in
            _ = try await app.dependencies.auth.createAdmin(email: "op@example.com", password: Self.password, name: "Op", logger: TestDatabase.logger)
            let cookie = try #require(Self.cookie("console_session", in: try await Self.signIn(client, email: "op@example.com"))).value
            let admin = try await app.apiKey(["admin"])
            let alice = try await app.userID(token: try await client.signUpAndVerify(app, email: "alice@example.com"))
            let bob = try await app.userID(token: try await client.signUpAndVerify(app, email: "bob@example.com"))
            let granted = try await client.send(
                .post, "/api/admin/users/\(bob)/grants", token: admin, json: #"{"amount":10,"bucket":"purchased"}"#, headers: [.idempotencyKey: "g1"])
            #expect(granted.status == .created)
            let history = try await client.get("/api/admin/users/\(bob)/token-history", token: admin).json(History.self)
            let entry = try #require(history.entries.first)
            let csrf = ConsoleGate.csrfToken(session: cookie)
            func reverse(on page: String) async throws -> TestResponse {
                try await client.execute(
                    uri: "/console/users/\(page)/reverse", method: .post,
                    headers: [.contentType: "application/x-www-form-urlencoded", .cookie: "console_session=\(cookie)"],
                    body: Self.form(["csrf": csrf, "transfer": entry.id]))
            }
            #expect(try await reverse(on: alice).status == .notFound)
            #expect(try await app.rows("SELECT operation_id FROM ledger_reversals").isEmpty)
            let done = try await reverse(on: bob)
            #expect(done.status == .ok && String(buffer: done.body).contains("admin_transfer_reversed"))
        }
    }

    struct Sessions: Decodable { let sessions: [Session]; struct Session: Decodable { let id: String; let userAgent: String? } }

    @Test(arguments: Engine.allCases)
    func operatorsListRevokeAndEraseOverTheAPI(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let admin = try await app.apiKey(["admin"])
            let first = try await client.signUpAndVerify(app, email: "ada@example.com")
            let second = try await client.signIn("ada@example.com", "correct horse battery").json(SignInBody.self).session.token
            let userID = try await app.userID(token: first)
            let listed = try await client.get("/api/admin/users/\(userID)/sessions", token: admin).json(Sessions.self)
            #expect(listed.sessions.count == 2)
            let one = try #require(listed.sessions.first)
            #expect(try await client.send(.delete, "/api/admin/users/\(userID)/sessions/\(one.id)", token: admin).status == .noContent)
            #expect(try await client.send(.delete, "/api/admin/users/\(userID)/sessions/\(one.id)", token: admin).status == .notFound)
            #expect(try await client.send(.delete, "/api/admin/users/\(userID)/sessions", token: admin).status == .noContent)
            for token in [first, second] { #expect(try await client.get("/api/auth/session", token: token).status == .unauthorized) }
            #expect(try await client.get("/api/admin/users/nobody/sessions", token: admin).status == .notFound)
            #expect(try await client.get("/api/admin/users/\(userID)/sessions", token: first).status == .unauthorized)
            // Erasure needs the address typed; once erased it is gone (404), and it was announced once.
            let wrong = try await client.send(.post, "/api/admin/users/\(userID)/erase", token: admin, json: #"{"confirm":"someone@example.com"}"#)
            #expect(wrong.status == .badRequest)
            let erased = try await client.send(.post, "/api/admin/users/\(userID)/erase", token: admin, json: #"{"confirm":"ADA@example.com"}"#)
            #expect(erased.status == .noContent)
            #expect(
                try await client.send(.post, "/api/admin/users/\(userID)/erase", token: admin, json: #"{"confirm":"ada@example.com"}"#).status
                    == .notFound)
            #expect(try await app.rows("SELECT email FROM users WHERE id = ?", [userID]).first?.optionalString("email") == nil)
            #expect(try await app.rows("SELECT id FROM audit_log WHERE action = 'account_deleted' AND subject = ?", [userID]).count == 1)
            // An erased account takes no new plan.
            #expect(try await client.comp(app, userID: userID, plan: "pro_monthly", key: admin).status == .notFound)
        }
    }

    @Test func everyTemplateParsesAndTheFormReaderNeverTraps() async throws {
        #expect(ConsolePages().broken.isEmpty)
        #expect(try ConsoleForm(body: "a=1&b=%C3%A9+x&c=")["b"] == "é x")
        #expect(throws: Problem.self) { try ConsoleForm(body: "a=1&a=2") }
        #expect(throws: Problem.self) { try ConsoleForm(body: "a=%E0%A4") }
        // Separators are bytes: a combining mark after '&' or '=' hides nothing (the duplicate is still seen).
        #expect(throws: Problem.self) { try ConsoleForm(body: "x=\u{301}y&x=\u{301}z") }
        #expect(throws: Problem.self) { try ConsoleForm(bytes: Array("a=".utf8) + [0xFF, 0xFE]) }
        #expect(throws: Problem.self) { try ConsoleForm(body: "a=%4") }
        #expect(throws: Problem.self) { try ConsoleForm(body: (0...64).map { "f\($0)=1" }.joined(separator: "&")) }
        // The bytes as they arrive (invalid UTF-8 included), from Tests/FuzzCorpus/console-forms and its mutants.
        var parsed = 0
        await Fuzzer(corpus: try Fuzzer.corpus("console-forms", root: repositoryRoot), iterationsMin: 1001).run { input in
            if (try? ConsoleForm(bytes: input)) != nil { parsed += 1 }
        }
        #expect(parsed > 0)
    }
}
