import AccountAPI
import ArgumentParser
import Auth
import Entitlements
import Foundation
import Hummingbird
import Ledger
import Logging
import NIOCore
import NIOPosix
import Storage

@main
struct AccountServiceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "account-service",
        abstract: "Accounts, family profiles, subscriptions, entitlements and a token ledger over HTTP.",
        subcommands: [Serve.self, Migrate.self, Plans.self, Admin.self, APIKeyCommand.self, LedgerCommand.self, Argon2Command.self],
        defaultSubcommand: Serve.self
    )

    /// Swift concurrency's global executor becomes NIO's event loops, so an awaited database call resumes on the
    /// thread that did the I/O instead of hopping to the cooperative pool (measured: the spend path was mostly
    /// context switches). `ASYNC_ON_EVENT_LOOPS=false` keeps the default executor.
    static func main() async {
        if ProcessInfo.processInfo.environment["ASYNC_ON_EVENT_LOOPS"] != "false" {
            NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
        }
        await main(nil)
    }
}

/// Configuration from the environment, as a command-line error when it is invalid.
enum CLI {
    static func config() throws -> AppConfig {
        do { return try AppConfig.from(environment: ProcessInfo.processInfo.environment) } catch {
            throw ValidationError(error.description)
        }
    }
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Apply migrations and serve HTTP (the default).")

    func run() async throws {
        let config = try CLI.config()
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
        let config = try CLI.config()
        let logger = Startup.bootstrapLogging(config)
        try await Startup.withMigratedDatabase(config: config, logger: logger) { dependencies, applied in
            print("applied \(applied.count) migration(s) on \(dependencies.database.engine): \(applied.map(\.file).joined(separator: ", "))")
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

struct Admin: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Operator accounts.", subcommands: [Create.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a verified user with role admin.")
        @Option(name: .long, help: "The operator's email address.") var email: String
        @Option(name: .long, help: "Password (10–128 characters). Prefer --password-stdin, which keeps it out of the process list.")
        var password: String?
        @Flag(name: .long, help: "Read the password from standard input.") var passwordStdin = false
        @Option(name: .long, help: "Display name.") var name = "Administrator"

        func run() async throws {
            guard let secret = passwordStdin ? readLine(strippingNewline: true) : password else {
                throw ValidationError("give --password or --password-stdin")
            }
            let config = try CLI.config()
            let logger = Startup.bootstrapLogging(config)
            try await Startup.withMigratedDatabase(config: config, logger: logger) { dependencies, _ in
                do {
                    let user = try await dependencies.auth.createAdmin(email: email, password: secret, name: name, logger: logger)
                    print("created admin \(user.email) with id \(user.id)")
                } catch let error as AuthError {
                    throw ValidationError(error.message)
                }
            }
        }
    }
}

struct APIKeyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "api-key", abstract: "Service API keys (sent as Authorization: Bearer).", subcommands: [Create.self, List.self, Revoke.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a key; prints it once, as the last word of the output.")
        @Option(name: .long, help: "What the key is for.") var name: String
        @Option(name: .long, help: "Comma-separated: admin, ledger:write, ledger:read, entitlements:read.") var scopes: String

        func run() async throws {
            let config = try CLI.config()
            try await Startup.withMigratedDatabase(config: config, logger: Startup.bootstrapLogging(config)) { dependencies, _ in
                do {
                    let (key, secret) = try await dependencies.apiKeys.create(
                        name: name, scopes: scopes.split(separator: ",").map(String.init), logger: Logger(label: "cli"))
                    print("created API key \(key.id) (\(key.scopes.sorted().joined(separator: ","))); store it now, it is not shown again:")
                    print(secret)
                } catch let error as AuthError {
                    throw ValidationError(error.message)
                }
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List keys (never their secrets).")
        func run() async throws {
            let config = try CLI.config()
            try await Startup.withMigratedDatabase(config: config, logger: Startup.bootstrapLogging(config)) { dependencies, _ in
                for key in try await dependencies.apiKeys.list(logger: Logger(label: "cli")) {
                    let state = key.revokedAt == nil ? "active" : "revoked"
                    print("\(key.id)\t\(state)\t\(key.scopes.sorted().joined(separator: ","))\t\(key.name)")
                }
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a key by id.")
        @Argument(help: "The key id (from api-key list).") var id: String
        func run() async throws {
            let config = try CLI.config()
            try await Startup.withMigratedDatabase(config: config, logger: Startup.bootstrapLogging(config)) { dependencies, _ in
                guard try await dependencies.apiKeys.revoke(id: id, logger: Logger(label: "cli")) else {
                    throw ValidationError("no active key with id \(id)")
                }
                print("revoked \(id)")
            }
        }
    }
}

struct Argon2Command: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "argon2", abstract: "Password-hashing tools.", subcommands: [Bench.self])

    struct Bench: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Time one Argon2id hash with the configured parameters (ARGON2_*); prints the median in ms and the per-core limit.")
        @Option(name: .long, help: "How many hashes to time (sequentially, then spread over the cores).") var count = 20

        static func fixed(_ value: Double) -> String { String(Double(Int((value * 100).rounded())) / 100) }

        func run() async throws {
            let config = try CLI.config()
            var samples: [Double] = []
            for i in 0..<max(3, count) {
                let start = ContinuousClock.now
                _ = try Argon2.hash("benchmark password \(i)", parameters: config.argon2)
                let elapsed = ContinuousClock.now - start
                samples.append(Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15)
            }
            samples.sort()
            let median = samples[samples.count / 2]
            let cores = ProcessInfo.processInfo.activeProcessorCount
            // The limit: one hash per core at once, as the server runs them. Hashes running side by side share
            // memory bandwidth, so this is lower than cores ÷ one hash's time (which is printed too).
            let perCore = max(2, count / cores)
            let start = ContinuousClock.now
            DispatchQueue.concurrentPerform(iterations: cores) { core in
                for i in 0..<perCore { _ = try? Argon2.hash("benchmark password \(core)-\(i)", parameters: config.argon2) }
            }
            let elapsed = ContinuousClock.now - start
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            print(
                "argon2id \(config.argon2) median_ms=\(Self.fixed(median)) cores=\(cores) single_limit_per_s=\(Self.fixed(Double(cores) * 1000 / median))"
                    + " limit_per_s=\(Self.fixed(Double(cores * perCore) / seconds))")
        }
    }
}

struct LedgerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ledger", abstract: "Token ledger tools.", subcommands: [Verify.self])

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Recompute every balance from the transfers; non-zero exit on any difference.")
        func run() async throws {
            let config = try CLI.config()
            try await Startup.withMigratedDatabase(config: config, logger: Startup.bootstrapLogging(config)) { dependencies, _ in
                let report = try await dependencies.ledger.verify(logger: Logger(label: "cli"))
                print("ledger verify: \(report.ok ? "OK" : "DIFFERENCES") — \(report.accountsChecked) accounts, \(report.transfersChecked) transfers")
                for difference in report.differences { print("  - \(difference)") }
                if !report.ok { throw ExitCode(2) }
            }
        }
    }
}
