import AccountAPI
import ArgumentParser
import Auth
import Foundation
import Logging

struct Admin: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Operator accounts.", subcommands: [Create.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a verified user with role admin.", discussion: CLI.databaseVariables + " Also ARGON2_* (the password hash).")
        @Option(name: .long, help: "The operator's email address.") var email: String
        @Option(name: .long, help: "Password (10–128 characters). Prefer --password-stdin, which keeps it out of the process list.")
        var password: String?
        @Flag(name: .long, help: "Read the password from standard input.") var passwordStdin = false
        @Option(name: .long, help: "Display name.") var name = "Administrator"

        func validate() throws {
            if password == nil && !passwordStdin { throw ValidationError("Give --password-stdin (or --password).") }
        }

        func run() async throws {
            guard let secret = passwordStdin ? readLine(strippingNewline: true) : password else {
                throw CLI.Failure("no password on standard input")
            }
            let config = try CLI.config()
            let logger = Startup.bootstrapLogging(config)
            CLI.noteNewDatabase(config)
            try await Startup.withMigratedDatabase(config: config, logger: logger) { dependencies, _ in
                let user = try await dependencies.auth.createAdmin(email: email, password: secret, name: name, logger: logger)
                print("created admin \(user.email) with id \(user.id)")
            }
        }
    }
}

struct APIKeyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "api-key", abstract: "Service API keys (sent as Authorization: Bearer).", subcommands: [Create.self, List.self, Revoke.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a key; prints it once, as the last word of the output.", discussion: CLI.databaseVariables)
        @Option(name: .long, help: "What the key is for.") var name: String
        @Option(name: .long, help: "Comma-separated: admin, ledger:write, ledger:read, entitlements:read.") var scopes: String

        func validate() throws {
            let unknown = Set(scopes.split(separator: ",").map(String.init)).subtracting(APIKeyService.knownScopes)
            if !unknown.isEmpty || scopes.isEmpty {
                throw ValidationError(
                    "Unknown scope(s) '\(scopes.prefix(80))'; known: \(APIKeyService.knownScopes.sorted().joined(separator: ", ")).")
            }
        }

        func run() async throws {
            let config = try CLI.config()
            CLI.noteNewDatabase(config)
            try await Startup.withMigratedDatabase(config: config, logger: Startup.bootstrapLogging(config)) { dependencies, _ in
                let (key, secret) = try await dependencies.apiKeys.create(
                    name: name, scopes: scopes.split(separator: ",").map(String.init), logger: Logger(label: "cli"))
                print("created API key \(key.id) (\(key.scopes.sorted().joined(separator: ","))); store it now, it is not shown again:")
                print(secret)
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List keys (id, state, scopes, name; never their secrets).", discussion: CLI.databaseVariables)
        func run() async throws {
            try await CLI.withExistingDatabase { dependencies, logger in
                let keys = try await dependencies.apiKeys.list(logger: logger)
                if keys.isEmpty { print("no API keys yet (account-service api-key create --name NAME --scopes SCOPES)") }
                for key in keys {
                    let state = key.revokedAt == nil ? "active" : "revoked"
                    print("\(key.id)\t\(state)\t\(key.scopes.sorted().joined(separator: ","))\t\(key.name)")
                }
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a key by id.", discussion: CLI.databaseVariables)
        @Argument(help: "The key id (the first column of api-key list).") var id: String
        func run() async throws {
            try await CLI.withExistingDatabase { dependencies, logger in
                guard try await dependencies.apiKeys.revoke(id: id, logger: logger) else {
                    throw CLI.Failure("no active key with id \(id)")
                }
                print("revoked \(id)")
            }
        }
    }
}
