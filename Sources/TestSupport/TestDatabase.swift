import Clock
import Foundation
import Logging
import NIOPosix
import PostgresNIO
import Storage

/// Fresh, empty databases for tests on either engine.
///
/// PostgreSQL comes from `TEST_POSTGRES_URL` (an account allowed to CREATE DATABASE on a loopback server; the
/// test command starts a throwaway one). Under `CI=true` a missing PostgreSQL fails the run instead of skipping.
public enum TestDatabase {
    public static let logger: Logger = {
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        return logger
    }()

    /// Tests run many pools in parallel on a 2-core machine: wait longer for a connection than production's 3 s. All
    /// tests start at once, and in the first minute a loaded CI host has answered a 1 s timer 38 s late.
    public static let leaseTimeoutSeconds: Double = 60

    /// The engines to run contract tests on: both in CI or when PostgreSQL is configured.
    public static var engines: [Engine] {
        let env = ProcessInfo.processInfo.environment
        if env["TEST_POSTGRES_URL"] != nil || env["CI"] == "true" { return [.sqlite, .postgres] }
        FileHandle.standardError.write(Data("warning: TEST_POSTGRES_URL unset; PostgreSQL contract tests not run (use scripts/test)\n".utf8))
        return [.sqlite]
    }

    /// A new empty database and its DATABASE_URL; `drop()` removes it.
    public struct Handle: Sendable {
        public let engine: Engine
        public let url: String
        let dropAction: @Sendable () async throws -> Void
        public func drop() async throws { try await dropAction() }
    }

    public static func create(_ engine: Engine) async throws -> Handle {
        switch engine {
        case .sqlite:
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("as-test-\(FreshID.uuid())")
            let path = dir.appendingPathComponent("test.sqlite").path
            return Handle(engine: .sqlite, url: "sqlite:\(path)") { try? FileManager.default.removeItem(at: dir) }
        case .postgres:
            let admin = try adminURL()
            let name = "t_" + FreshID.hex().prefix(20)
            try await adminExecute(admin, "CREATE DATABASE \(name)")
            var components = URLComponents(string: admin)!
            components.path = "/\(name)"
            // Tests run many servers at once on two shared cores, where a TLS connection can take more than the
            // service's 3 s to open; an outage is not what they test.
            if !(components.queryItems ?? []).contains(where: { $0.name == "connect_timeout" }) {
                components.queryItems = (components.queryItems ?? []) + [URLQueryItem(name: "connect_timeout", value: "20")]
            }
            return Handle(engine: .postgres, url: components.string!) {
                try await adminExecute(admin, "DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
            }
        }
    }

    /// Runs `body` with an open `Database` on a fresh database (PostgreSQL's pool running meanwhile).
    public static func with<T: Sendable>(_ engine: Engine, _ body: @Sendable (any Database, Handle) async throws -> T) async throws -> T {
        let handle = try await create(engine)
        do {
            let result = try await open(handle) { try await body($0, handle) }
            try await handle.drop()
            return result
        } catch {
            try? await handle.drop()
            throw error
        }
    }

    /// Opens a database at `handle` (another connection or pool to the same database each call).
    public static func open<T: Sendable>(_ handle: Handle, _ body: @Sendable (any Database) async throws -> T) async throws -> T {
        guard let location = try? DatabaseLocation.parse(handle.url) else { throw TestDatabaseError.badURL }
        switch location {
        case .sqlite(let path):
            let database = try await SQLiteDatabase.open(path: path, logger: logger)
            do {
                let result = try await body(database)
                try await database.close()
                return result
            } catch {
                try? await database.close()
                throw error
            }
        case .postgres(let url):
            let pool = PostgresPool(configuration: try PostgresDatabase.configuration(url: url), logger: logger)
            return try await withThrowingTaskGroup(of: T?.self) { group in
                group.addTask {
                    await pool.run()
                    return nil
                }
                let database = PostgresDatabase(pool: pool, leaseTimeoutSeconds: leaseTimeoutSeconds, batchedStatements: true)
                do {
                    let result = try await body(database)
                    try await database.close()
                    group.cancelAll()
                    return result
                } catch {
                    try? await database.close()
                    group.cancelAll()
                    throw error
                }
            }
        }
    }

    static func adminURL() throws -> String {
        guard let url = ProcessInfo.processInfo.environment["TEST_POSTGRES_URL"] else {
            throw TestDatabaseError.postgresMissing
        }
        let host = URLComponents(string: url)?.host ?? ""
        guard ["127.0.0.1", "localhost", "::1", "[::1]"].contains(host) else { throw TestDatabaseError.notLoopback(host) }
        return url
    }

    /// Runs `sql` on the test server's administrative database (e.g. to change a test database from outside it).
    public static func executeAsAdmin(_ sql: String) async throws { try await adminExecute(try adminURL(), sql) }

    static func adminExecute(_ url: String, _ sql: String) async throws {
        let c = URLComponents(string: url)!
        let config = PostgresConnection.Configuration(
            host: c.host!, port: c.port ?? 5432, username: c.user ?? "postgres", password: c.password,
            database: String(c.path.dropFirst()).isEmpty ? "postgres" : String(c.path.dropFirst()), tls: .disable)
        let connection = try await PostgresConnection.connect(
            on: MultiThreadedEventLoopGroup.singleton.any(), configuration: config, id: 1, logger: logger)
        do {
            try await connection.query(PostgresQuery(unsafeSQL: sql), logger: logger)
            try await connection.close()
        } catch {
            try? await connection.close()
            throw error
        }
    }
}

public enum TestDatabaseError: Error, CustomStringConvertible {
    case postgresMissing
    case notLoopback(String)
    case badURL
    public var description: String {
        switch self {
        case .postgresMissing: "CI=true but TEST_POSTGRES_URL is not set: PostgreSQL tests must run in CI (use scripts/test)"
        case .notLoopback(let h): "TEST_POSTGRES_URL must point at a loopback host, not '\(h)'"
        case .badURL: "bad test database URL"
        }
    }
}
