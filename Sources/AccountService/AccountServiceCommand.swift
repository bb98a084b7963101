import AccountAPI
import ArgumentParser
import Auth
import Foundation
import Logging
import NIOCore
import NIOPosix
import Storage

@main
struct AccountServiceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "account-service",
        abstract: "Accounts, family profiles, subscriptions, entitlements and a token ledger over HTTP.",
        discussion: """
            Configuration comes from environment variables, never from files or flags: DATABASE_URL (default \
            sqlite:data/account-service.sqlite, relative to the current directory), PLANS_FILE (default: the built-in catalog), \
            HOST, PORT, MAIL_TRANSPORT and more. Each command's --help lists what it reads; all of them: docs/operations.md.
            """,
        subcommands: [
            Serve.self, Migrate.self, Demo.self, Admin.self, APIKeyCommand.self, LedgerCommand.self, Plans.self, Argon2Command.self,
            MediaCommand.self, BackupCommand.self, RestoreCommand.self, BillingCommand.self,
        ]
    )

    /// Swift concurrency's global executor becomes NIO's event loops, so an awaited database call resumes on the
    /// thread that did the I/O instead of hopping to the cooperative pool (measured: the spend path was mostly
    /// context switches). `ASYNC_ON_EVENT_LOOPS=false` keeps the default executor.
    ///
    /// Errors are reported against the command that failed: a usage error prints that subcommand's usage, any other
    /// failure one `error:` line (no usage: the command line was fine).
    static func main() async {
        if ProcessInfo.processInfo.environment["ASYNC_ON_EVENT_LOOPS"] != "false" {
            NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
        }
        let command: any ParsableCommand
        do { command = try parseAsRoot() } catch { exit(withError: error) }
        do {
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                var syncCommand = command
                try syncCommand.run()
            }
        } catch {
            // ArgumentParser's own errors (help requests, validation, exit codes) print as it prints them.
            if String(reflecting: type(of: error)).hasPrefix("ArgumentParser.") { type(of: command).exit(withError: error) }
            FileHandle.standardError.write(Data("error: \(CLI.message(error))\n".utf8))
            Foundation.exit(1)
        }
    }
}

/// What the commands share: the configuration, and failures worded for a terminal.
enum CLI {
    /// What every command that opens the database reads (shown in its --help).
    static let databaseVariables = """
        Reads DATABASE_URL (default sqlite:data/account-service.sqlite, relative to the current directory; \
        postgres://… for PostgreSQL), DATA_DIR (default data) and SERVER_SECRET. The whole environment is validated, as \
        the server does.
        """

    /// The configuration from the environment; every problem is listed at once.
    /// Tools log warnings and errors only unless LOG_LEVEL says otherwise (their output is what they print); `serve`
    /// passes `tool: false` and logs at LOG_LEVEL's default, info.
    static func config(tool: Bool = true) throws -> AppConfig {
        var environment = ProcessInfo.processInfo.environment
        if tool && environment["LOG_LEVEL"] == nil { environment["LOG_LEVEL"] = "warning" }
        do { return try AppConfig.from(environment: environment) } catch { throw Failure(error.description) }
    }

    /// Runs `body` against the configured database, which must exist already (tools never create an empty one).
    static func withExistingDatabase(_ body: @escaping @Sendable (Dependencies, Logger) async throws -> Void) async throws {
        let config = try config()
        try await Startup.withMigratedDatabase(config: config, logger: Startup.bootstrapLogging(config), existingOnly: true) { dependencies, _ in
            try await body(dependencies, Logger(label: "cli"))
        }
    }

    /// Writes a note when a command is about to create a new SQLite database: run from the wrong directory, what it
    /// writes would land in a database the server does not use.
    static func noteNewDatabase(_ config: AppConfig) {
        guard let path = Startup.missingSQLiteFile(config) else { return }
        FileHandle.standardError.write(
            Data("note: no database at \(path) yet; creating it. The server must use the same one (same directory or DATABASE_URL).\n".utf8))
    }

    /// A failure that is not about the command line (no usage is printed).
    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    static func message(_ error: any Error) -> String {
        switch error {
        case let error as AuthError: error.message
        default: loggedDescription(of: error)
        }
    }
}
