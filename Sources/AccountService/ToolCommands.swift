import AccountAPI
import ArgumentParser
import Auth
import Entitlements
import Foundation
import Ledger
import Logging
import Media

struct LedgerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ledger", abstract: "Token ledger tools.", subcommands: [Verify.self])

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Recompute every balance from the transfers; exit 2 on any difference.", discussion: CLI.databaseVariables)
        func run() async throws {
            try await CLI.withExistingDatabase { dependencies, logger in
                let report = try await dependencies.ledger.verify(logger: logger)
                print("ledger verify: \(report.ok ? "OK" : "DIFFERENCES") — \(report.accountsChecked) accounts, \(report.transfersChecked) transfers")
                for difference in report.differences { print("  - \(difference)") }
                if !report.ok { throw ExitCode(2) }
            }
        }
    }
}

struct BillingCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "billing", abstract: "Billing tools.", subcommands: [Reconcile.self])

    struct Reconcile: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Compare Apple purchases with Apple's records (App Store Server API) and repair what notifications missed.",
            discussion:
                "Needs APPLE_BUNDLE_ID, APPLE_ENVIRONMENT, APPLE_ROOT_CERTIFICATES and APPLE_API_KEY_ID, APPLE_API_ISSUER_ID, APPLE_API_PRIVATE_KEY_FILE. "
                + CLI.databaseVariables)
        @Option(name: .long, help: "One account's id.")
        var user: String?
        @Flag(name: .long, help: "Every account with Apple purchases.")
        var all = false

        func validate() throws {
            guard (user != nil) != all else { throw ValidationError("Give exactly one of --user ID and --all.") }
        }

        func run() async throws {
            try await CLI.withExistingDatabase { dependencies, logger in
                for line in try await dependencies.reconcileApple(userID: user, logger: logger) { print(line) }
            }
        }
    }
}

struct Plans: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Plan catalog tools.", subcommands: [Validate.self])

    struct Validate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Validate a plans file; exit 1 listing every problem.",
            discussion: "Reads PLANS_FILE when --file is not given; with neither, checks the built-in catalog.")
        @Option(name: .long, help: "The plans file (default: PLANS_FILE, else the built-in catalog).")
        var file: String?

        func run() async throws {
            let path = file ?? ProcessInfo.processInfo.environment["PLANS_FILE"]
            do {
                let catalog = try path.map { try PlanCatalog.load(path: $0) } ?? PlanCatalog.builtIn
                print(
                    "\(path ?? "built-in catalog"): OK — \(catalog.plans.count) plans, \(catalog.tokenPacks.count) token packs, welcomeTokens \(catalog.welcomeTokens)"
                )
            } catch {
                throw CLI.Failure("\(path ?? "built-in catalog"): \(error)")
            }
        }
    }
}

struct Argon2Command: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "argon2", abstract: "Password-hashing tools.", subcommands: [Bench.self])

    struct Bench: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Time one Argon2id hash with the configured parameters; prints the median in ms and the per-core limit.",
            discussion: "Reads ARGON2_MEMORY_KIB, ARGON2_ITERATIONS and ARGON2_PARALLELISM (docs/operations.md).")
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

struct MediaCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "media", abstract: "Sticker image tools.", subcommands: [Bench.self])

    struct Bench: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Thumbnails per second (libvips, in the image worker) for a 1024×1024 RGBA PNG: one core, then every core.")
        @Option(name: .long, help: "Thumbnails per core.") var count = 40

        func run() async throws {
            print(try ImageWorker().bench(count: count))
        }
    }
}
