import Foundation
import Logging
import PostgresNIO
import Storage

/// What every command does before its work: the logging backend, and for one-shot commands a migrated database.
public enum Startup {
    /// For one-shot commands: opens the database (running the PostgreSQL pool meanwhile), migrates, runs `body`. With
    /// `existingOnly`, a SQLite file that does not exist yet is an error instead of a new, empty database (a command that
    /// only reads, run from the wrong directory).
    /// The configured SQLite file when it does not exist yet (opening it would create an empty database).
    public static func missingSQLiteFile(_ config: AppConfig) -> String? {
        guard case .sqlite(let path) = config.database, path != ":memory:", !FileManager.default.fileExists(atPath: path) else { return nil }
        return path
    }

    public static func withMigratedDatabase(
        config: AppConfig, logger: Logger, existingOnly: Bool = false, _ body: @Sendable (Dependencies, [Migration]) async throws -> Void
    ) async throws {
        if existingOnly, let path = missingSQLiteFile(config) {
            throw StartupError(
                message: "no database at \(path) (DATABASE_URL): run this in the directory the server runs in, or set DATABASE_URL")
        }
        let dependencies = try await Dependencies.make(config: config, logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            if let hosts = dependencies.postgresHosts { group.addTask { await hosts.run() } }
            defer { group.cancelAll() }
            let database = dependencies.database
            try await body(dependencies, try await database.migrate(database.engine.migrations, logger: logger))
        }
        try await dependencies.database.close()
    }

    /// Bootstraps swift-log with the configured format and level (once per process) and returns the service's logger.
    public static func bootstrapLogging(_ config: AppConfig) -> Logger {
        let level = config.logLevel
        switch config.logFormat {
        case .json: LoggingSystem.bootstrap { label in JSONLogHandler(label: label, logLevel: level) }
        case .text:
            LoggingSystem.bootstrap { label in
                var handler = TextLogHandler(label: label)
                handler.logLevel = level
                return handler
            }
        }
        var logger = Logger(label: "account-service")
        logger.logLevel = level
        return logger
    }
}
