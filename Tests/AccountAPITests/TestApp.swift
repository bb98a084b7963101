import Auth
import Clock
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import Mail
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
        // Tests run the webhook worker's passes themselves (``TestApp/deliverWebhooks()``), on the test clock.
        config.webhookWorker = false
        configure(&config)
        let clock = ManualTimeSource(Date())
        let dependencies = try await Dependencies.make(config: config, clock: clock, logger: logger)
        let testApp = TestApp(dependencies: dependencies, clock: clock, mailDirectory: mailDirectory, handle: handle)
        let app = buildApplication(dependencies, logger: logger)
        // ServiceLifecycle names every service by `"\(service)"` (at start-up, in debug logs and errors): each describes
        // itself by name (``NamedService``), never by reflecting what it holds, whatever the configuration.
        let names = app.services.map { "\($0)" }
        #expect(names.allSatisfy { $0.count <= 40 && !$0.contains("(") }, "\(names.map { $0.prefix(120) })")
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
