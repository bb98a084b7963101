import AccountAPI
import ArgumentParser
import Foundation
import Hummingbird
import Logging
import Storage

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Apply pending migrations and serve HTTP.",
        discussion: """
            Reads HOST and PORT (127.0.0.1:8080), DATABASE_URL, DATA_DIR, SERVER_SECRET (required with PostgreSQL), PLANS_FILE \
            (default: the built-in catalog), MAIL_TRANSPORT (log, file:DIR or sendmail:PATH), MAIL_FROM, LOG_LEVEL, LOG_FORMAT, \
            TRUSTED_PROXIES, METRICS_TOKEN, APPLE_*, STRIPE_WEBHOOK_SECRET, ARGON2_* and the limits; every variable with its \
            default: docs/operations.md.
            """)

    func run() async throws {
        let config = try CLI.config(tool: false)
        let logger = Startup.bootstrapLogging(config)
        logger.info("starting", metadata: ["config": "\(config)"])
        let dependencies = try await Dependencies.make(config: config, logger: logger)
        try await serve(dependencies, logger: logger)
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Apply pending database migrations and exit (serve does this too).", discussion: CLI.databaseVariables)

    func run() async throws {
        let config = try CLI.config()
        let logger = Startup.bootstrapLogging(config)
        try await Startup.withMigratedDatabase(config: config, logger: logger) { dependencies, applied in
            let engine = dependencies.database.engine
            if applied.isEmpty {
                print("\(engine): up to date (\(engine.migrations.count) migrations applied earlier)")
            } else {
                print("\(engine): applied \(applied.count) migration(s): \(applied.map(\.file).joined(separator: ", "))")
            }
        }
    }
}

struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Load demo data: three sticker packs (free, bought with tokens, included in Pro) and an operator account.",
        discussion: """
            The operator is \(DemoData.operatorEmail); its password is printed once, when the account is created. Running it \
            again changes nothing. \(CLI.databaseVariables)
            """)

    func run() async throws {
        let config = try CLI.config()
        try await Startup.withMigratedDatabase(config: config, logger: Startup.bootstrapLogging(config)) { dependencies, _ in
            let report = try await DemoData.load(dependencies, logger: Logger(label: "cli"))
            if !report.packsCreated.isEmpty { print("sticker packs created: \(report.packsCreated.joined(separator: ", "))") }
            if !report.packsKept.isEmpty { print("sticker packs already there: \(report.packsKept.joined(separator: ", "))") }
            if let password = report.operatorPassword {
                print("operator created: \(DemoData.operatorEmail), password (shown once): \(password)")
            } else {
                print("operator \(DemoData.operatorEmail) already exists (password unchanged)")
            }
        }
    }
}
