import Auth
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import Storage
import TestSupport
import Testing

@testable import AccountService

/// The repository root (tests read plans.json, openapi.yaml and migrations from it).
let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// A running app on a fresh database of `engine`, driven through the router.
struct TestApp {
    let dependencies: Dependencies
    let clock: ManualTimeSource
    let mailDirectory: URL
    let handle: TestDatabase.Handle

    static func run(
        _ engine: Engine, configure: @Sendable (inout AppConfig) -> Void = { _ in },
        _ body: @Sendable (any TestClientProtocol, TestApp) async throws -> Void
    ) async throws {
        let handle = try await TestDatabase.create(engine)
        let mailDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("as-mail-\(UUID().uuidString)")
        var config = AppConfig()
        config.database = try DatabaseLocation.parse(handle.url)
        config.plansFile = repositoryRoot.appendingPathComponent("plans.json").path
        config.mailTransport = .file(directory: mailDirectory.path)
        configure(&config)
        let clock = ManualTimeSource(Date())
        let dependencies = try await Dependencies.make(config: config, clock: clock, logger: TestDatabase.logger)
        let testApp = TestApp(dependencies: dependencies, clock: clock, mailDirectory: mailDirectory, handle: handle)
        let app = buildApplication(dependencies, logger: TestDatabase.logger)
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
    /// POSTs a JSON body (a string, so tests can send malformed JSON too).
    @discardableResult
    func post(_ uri: String, json: String, headers: HTTPFields = [:]) async throws -> TestResponse {
        var fields = headers
        if fields[.contentType] == nil { fields[.contentType] = "application/json" }
        return try await execute(uri: uri, method: .post, headers: fields, body: ByteBuffer(string: json))
    }
}
