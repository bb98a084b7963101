import Auth
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import Storage
import TestSupport
import Testing

@testable import AccountAPI

/// The repository root (tests read plans.json, openapi.yaml and migrations from it).
let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// A running app on a fresh database of `engine`, driven through the router.
struct TestApp {
    /// `METRICS_TOKEN` of every test app.
    static let metricsToken = "test-metrics-token-0123456789"
    let dependencies: Dependencies
    let clock: ManualTimeSource
    let mailDirectory: URL
    let handle: TestDatabase.Handle

    static func run(
        _ engine: Engine, logger: Logger = TestDatabase.logger, configure: @Sendable (inout AppConfig) -> Void = { _ in },
        _ body: @Sendable (any TestClientProtocol, TestApp) async throws -> Void
    ) async throws {
        let handle = try await TestDatabase.create(engine)
        let mailDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("as-mail-\(UUID().uuidString)")
        var config = AppConfig()
        config.database = try DatabaseLocation.parse(handle.url)
        config.plansFile = repositoryRoot.appendingPathComponent("plans.json").path
        config.mailTransport = .file(directory: mailDirectory.path)
        config.dataDirectory = mailDirectory.path
        config.serverSecret = "test-server-secret-0123456789abcdef0123456789"
        // Cheap hashes keep the suite fast; tests of the cost parameters set their own.
        config.argon2 = Argon2Parameters(memoryKiB: 64, iterations: 1, parallelism: 1)
        config.databaseLeaseTimeoutSeconds = TestDatabase.leaseTimeoutSeconds
        config.metricsToken = metricsToken
        configure(&config)
        let clock = ManualTimeSource(Date())
        let dependencies = try await Dependencies.make(config: config, clock: clock, logger: logger)
        let testApp = TestApp(dependencies: dependencies, clock: clock, mailDirectory: mailDirectory, handle: handle)
        let app = buildApplication(dependencies, logger: logger)
        do {
            try await app.test(.router) { client in try await body(client, testApp) }
            try await dependencies.database.close()
            try await handle.drop()
        } catch {
            try? await dependencies.database.close()
            try? await handle.drop()
            throw error
        }
        try? FileManager.default.removeItem(at: mailDirectory)
    }
}

extension TestApp {
    /// The messages mailed so far to `address`, oldest first (subject and body, CRLF folded to LF).
    func mails(to address: String) throws -> [String] {
        guard FileManager.default.fileExists(atPath: mailDirectory.path) else { return [] }
        return try FileManager.default.contentsOfDirectory(atPath: mailDirectory.path).filter { $0.hasSuffix(".eml") }.sorted()
            .map { try String(contentsOf: mailDirectory.appendingPathComponent($0), encoding: .utf8).replacingOccurrences(of: "\r\n", with: "\n") }
            .filter { $0.contains("\nTo: \(address)\n") || $0.hasPrefix("To: \(address)\n") || $0.contains("To: \(address)\n") }
    }

    /// The last 6-digit code mailed to `address`.
    func lastCode(to address: String) throws -> String {
        let mail = try #require(try mails(to: address).last(where: { $0.contains(" code is ") }))
        let range = try #require(mail.range(of: #"code is \d{6}"#, options: .regularExpression))
        return String(mail[range].suffix(6))
    }

    /// Rows of `sql` (for assertions on what was stored).
    func rows(_ sql: String, _ binds: [any SQLBindable] = []) async throws -> [SQLRow] {
        try await dependencies.database.withConnection(logger: TestDatabase.logger) { try await $0.query(sql, binds) }
    }
}

/// A decoded problem body.
struct ProblemBody: Decodable, Equatable {
    let type: String
    let title: String
    let status: Int
    let detail: String
    let code: String
}

extension TestResponse {
    func json<T: Decodable>(_ type: T.Type) throws -> T { try JSONDecoder().decode(T.self, from: Data(body.readableBytesView)) }
    func problem() throws -> ProblemBody {
        #expect(headers[.contentType] == "application/problem+json")
        return try json(ProblemBody.self)
    }
    var text: String { String(buffer: body) }
}

extension TestClientProtocol {
    /// Signs up and verifies `email`; returns the session token.
    func signUpAndVerify(_ app: TestApp, email: String, password: String = "correct horse battery", name: String = "Ada") async throws -> String {
        let signUp = try await post("/api/auth/sign-up", json: #"{"email":"\#(email)","password":"\#(password)","name":"\#(name)"}"#)
        #expect(signUp.status == .ok)
        let code = try app.lastCode(to: email.lowercased())
        let verify = try await post("/api/verify-otp", json: #"{"email":"\#(email)","code":"\#(code)"}"#)
        #expect(verify.status == .ok)
        return try verify.json(SeedVerifyOTPResponseWithSession.self).session.token
    }

    func signIn(_ email: String, _ password: String, userAgent: String = "TestApp/1.0") async throws -> TestResponse {
        try await post("/api/auth/sign-in", json: #"{"email":"\#(email)","password":"\#(password)"}"#, headers: [.userAgent: userAgent])
    }

    func get(_ uri: String, token: String?) async throws -> TestResponse {
        var headers: HTTPFields = [:]
        if let token { headers[.authorization] = "Bearer \(token)" }
        return try await execute(uri: uri, method: .get, headers: headers)
    }

    func send(_ method: HTTPRequest.Method, _ uri: String, token: String?, json: String? = nil, headers extra: HTTPFields = [:]) async throws
        -> TestResponse
    {
        var headers = extra
        if let token { headers[.authorization] = "Bearer \(token)" }
        if json != nil { headers[.contentType] = "application/json" }
        return try await execute(uri: uri, method: method, headers: headers, body: json.map { ByteBuffer(string: $0) })
    }

    /// POSTs a JSON body (a string, so tests can send malformed JSON too).
    @discardableResult
    func post(_ uri: String, json: String, headers: HTTPFields = [:]) async throws -> TestResponse {
        var fields = headers
        if fields[.contentType] == nil { fields[.contentType] = "application/json" }
        return try await execute(uri: uri, method: .post, headers: fields, body: ByteBuffer(string: json))
    }
}
