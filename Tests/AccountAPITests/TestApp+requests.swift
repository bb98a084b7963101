import Auth
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import Mail
import NIOCore
import Storage
import TestSupport
import Testing

@testable import AccountAPI

extension TestApp {
    /// The messages mailed so far to `address`, oldest first (subject and body, CRLF folded to LF). Mail goes out after
    /// the answer, so the queue is flushed first.
    func mails(to address: String) async throws -> [String] {
        await dependencies.mailQueue.flush()
        guard FileManager.default.fileExists(atPath: mailDirectory.path) else { return [] }
        return try FileManager.default.contentsOfDirectory(atPath: mailDirectory.path).filter { $0.hasSuffix(".eml") }.sorted()
            .map { try String(contentsOf: mailDirectory.appendingPathComponent($0), encoding: .utf8).replacingOccurrences(of: "\r\n", with: "\n") }
            .filter { $0.contains("\nTo: \(address)\n") || $0.hasPrefix("To: \(address)\n") || $0.contains("To: \(address)\n") }
    }

    /// The last 6-digit code mailed to `address`.
    func lastCode(to address: String) async throws -> String {
        let mail = try #require(try await mails(to: address).last(where: { $0.contains(" code is ") }))
        let range = try #require(mail.range(of: #"code is \d{6}"#, options: .regularExpression))
        return String(mail[range].suffix(6))
    }

    /// The long code of the last code mail to `address` (``MailedCode``).
    func lastLongCode(to address: String) async throws -> String {
        let mail = try #require(try await mails(to: address).last(where: { $0.contains(" code is ") }))
        let range = try #require(mail.range(of: #"instead \([^)]*\): [A-Za-z0-9_-]{43}"#, options: .regularExpression))
        return String(mail[range].suffix(43))
    }

    /// Rows of `sql` (for assertions on what was stored).
    func rows(_ sql: String, _ binds: [any SQLBindable] = []) async throws -> [SQLRow] {
        try await dependencies.database.withConnection(logger: TestDatabase.logger) { try await $0.query(sql, binds) }
    }

    /// Runs one writing statement in a transaction of its own (to set up a state no endpoint makes).
    func write(_ sql: String, _ binds: [any SQLBindable] = []) async throws {
        try await dependencies.database.transaction(logger: TestDatabase.logger) { try await $0.query(sql, binds) }
    }

    /// From now on, a trigger counts the row versions `table`'s UPDATEs write (read with ``writes(to:)``).
    func countWrites(to table: String) async throws {
        try await write("CREATE TABLE \(table)_writes (id TEXT NOT NULL)")
        guard dependencies.database.engine == .postgres else {
            return try await write("CREATE TRIGGER \(table)_written AFTER UPDATE ON \(table) BEGIN INSERT INTO \(table)_writes VALUES (NEW.id); END")
        }
        try await write(
            """
            CREATE FUNCTION count_\(table)_write() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN INSERT INTO \(table)_writes VALUES (NEW.id); RETURN NEW; END $$
            """)
        try await write("CREATE TRIGGER \(table)_written AFTER UPDATE ON \(table) FOR EACH ROW EXECUTE FUNCTION count_\(table)_write()")
    }

    /// The row versions counted since ``countWrites(to:)``.
    func writes(to table: String) async throws -> Int {
        try await rows("SELECT id FROM \(table)_writes").count
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
        let code = try await app.lastCode(to: email.lowercased())
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

    func send(
        _ method: HTTPRequest.Method, _ uri: String, token: String?, json: String? = nil, headers extra: HTTPFields = [:]
    ) async throws
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
