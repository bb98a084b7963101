import ArgumentParser
import Entitlements
import Foundation
import Hummingbird
import Logging
import PostgresNIO
import Storage

@main
struct AccountServiceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "account-service",
        abstract: "Accounts, family profiles, subscriptions, entitlements and a token ledger over HTTP.",
        subcommands: [Serve.self, Migrate.self, Plans.self],
        defaultSubcommand: Serve.self
    )
}

/// Shared start-up: configuration from the environment and the logging backend.
enum Startup {
    static func config() throws -> AppConfig {
        do { return try AppConfig.from(environment: ProcessInfo.processInfo.environment) } catch {
            throw ValidationError(error.description)
        }
    }

    static func bootstrapLogging(_ config: AppConfig) -> Logger {
        let level = config.logLevel
        switch config.logFormat {
        case .json: LoggingSystem.bootstrap { label in JSONLogHandler(label: label, logLevel: level) }
        case .text:
            LoggingSystem.bootstrap { label in
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = level
                return handler
            }
        }
        var logger = Logger(label: "account-service")
        logger.logLevel = level
        return logger
    }
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Apply migrations and serve HTTP (the default).")

    func run() async throws {
        let config = try Startup.config()
        let logger = Startup.bootstrapLogging(config)
        logger.info("starting", metadata: ["config": "\(config)"])
        let dependencies = try await Dependencies.make(config: config, logger: logger)
        let app = buildApplication(dependencies, logger: logger)
        try await app.runService()
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Apply pending database migrations and exit.")

    func run() async throws {
        let config = try Startup.config()
        let logger = Startup.bootstrapLogging(config)
        let dependencies = try await Dependencies.make(config: config, logger: logger)
        let database = dependencies.database
        try await withThrowingTaskGroup(of: Void.self) { group in
            if let client = dependencies.postgresClient { group.addTask { await client.run() } }
            let applied = try await database.migrate(database.engine.migrations, logger: logger)
            print("applied \(applied.count) migration(s) on \(database.engine): \(applied.map(\.file).joined(separator: ", "))")
            group.cancelAll()
        }
    }
}

struct Plans: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Plan catalog tools.", subcommands: [Validate.self])

    struct Validate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Validate a plans file; non-zero exit listing every problem.")
        @Option(name: .long, help: "The plans file (default: PLANS_FILE or plans.json).")
        var file: String?

        func run() async throws {
            let path = file ?? ProcessInfo.processInfo.environment["PLANS_FILE"] ?? "plans.json"
            do {
                let catalog = try PlanCatalog.load(path: path)
                print("\(path): OK — \(catalog.plans.count) plans, \(catalog.tokenPacks.count) token packs, welcomeTokens \(catalog.welcomeTokens)")
            } catch {
                FileHandle.standardError.write(Data("\(path): \(error.description)\n".utf8))
                throw ExitCode(1)
            }
        }
    }
}
