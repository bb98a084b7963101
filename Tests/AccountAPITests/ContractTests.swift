import Clock
import Entitlements
import Foundation
import Hummingbird
import Storage
import TestSupport
import Testing

@testable import AccountAPI

@Suite("Contract", .cpuBound)
struct ContractTests {
    /// "METHOD /path/{param}" for every operation in openapi.yaml (the file's own consistent layout:
    /// paths at two spaces, methods at four).
    static func specOperations() throws -> Set<String> {
        let text = try String(contentsOf: repositoryRoot.appendingPathComponent("openapi.yaml"), encoding: .utf8)
        var operations = Set<String>()
        var inPaths = false
        var currentPath: String?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == "paths:" { inPaths = true; continue }
            if inPaths, !line.isEmpty, !line.hasPrefix(" ") { break }
            guard inPaths else { continue }
            if line.hasPrefix("  /"), line.hasSuffix(":"), !line.hasPrefix("   ") {
                currentPath = String(line.dropFirst(2).dropLast())
            } else if let path = currentPath, line.hasPrefix("    "), !line.hasPrefix("     "), line.hasSuffix(":") {
                let method = line.trimmingCharacters(in: .whitespaces).dropLast().uppercased()
                if ["GET", "POST", "PUT", "PATCH", "DELETE"].contains(method) { operations.insert("\(method) \(path)") }
            }
        }
        return operations
    }

    @Test func everyRouteIsInTheSpecAndViceVersa() async throws {
        try await TestApp.run(.sqlite) { _, app in
            let router = buildRouter(app.dependencies)
            let routes = Set(
                router.routes.map { route in
                    let path = "\(route.path)".split(separator: "/").map { $0.hasPrefix(":") ? "{\($0.dropFirst())}" : String($0) }.joined(
                        separator: "/")
                    return "\(route.method.rawValue) /\(path.drop { $0 == "/" })"
                })
            let spec = try Self.specOperations()
            #expect(spec.count >= 16)
            #expect(routes.subtracting(spec).isEmpty, "routes missing from openapi.yaml: \(routes.subtracting(spec).sorted())")
            #expect(spec.subtracting(routes).isEmpty, "documented but not routed: \(spec.subtracting(routes).sorted())")
        }
    }
}

extension ContractTests {
    /// Every problem `code` the sources can answer with is in the spec's `Problem.code` enum (clients switch on it).
    @Test func everyProblemCodeIsDocumented() throws {
        let spec = try String(contentsOf: repositoryRoot.appendingPathComponent("openapi.yaml"), encoding: .utf8)
        let enumStart = try #require(spec.range(of: "        code:\n          type: string\n          enum: ["))
        let enumText = spec[enumStart.upperBound...].prefix { $0 != "]" }
        let documented = Set(enumText.split(separator: ",").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) })
        var used = Set<String>()
        let sources = repositoryRoot.appendingPathComponent("Sources")
        let files = FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)?.compactMap { $0 as? URL } ?? []
        for file in files where file.pathExtension == "swift" {
            let text = try String(contentsOf: file, encoding: .utf8)
            for match in text.matches(of: /code: "([a-z_]+)"/) { used.insert(String(match.output.1)) }
        }
        used.formUnion(Refusal.allCases.map(\.rawValue))  // a reservation's refusal is its problem's code
        #expect(used.count >= 20)
        #expect(used.subtracting(documented).isEmpty, "codes missing from Problem.code in openapi.yaml: \(used.subtracting(documented).sorted())")
    }
}

extension ContractTests {
    /// Which module owns each table; no other module's code names it in SQL (it calls the owner, or embeds the owner's
    /// exported fragment). Every table the migrations create has an owner here.
    static let owners: [String: [String]] = [
        "Auth": [
            "users", "sessions", "otp_codes", "attempt_budgets", "known_devices", "family_profiles", "welcome_grants", "api_keys", "audit_log",
            "user_identities", "apple_signin_events", "email_changes", "totp_factors", "recovery_codes", "mfa_challenges", "sign_up_requests",
            "passkeys", "webauthn_used_challenges",
        ],
        "Ledger": [
            "ledger_accounts", "ledger_transfers", "ledger_lots", "ledger_holds", "ledger_hold_parts", "ledger_period_grants", "idempotency_records",
            "job_leases", "ledger_reversals", "ledger_profile_usage", "ledger_profile_spends",
        ],
        "Entitlements": [
            "subscriptions", "subscription_events", "sticker_packs", "pack_unlocks", "stickers", "sticker_uses", "sticker_quotas",
            "purchase_requests", "sticker_file_removals",
        ],
        "Billing": [
            "billing_events", "billing_accounts", "billing_grants", "billing_consents", "apple_consumption_requests", "apple_reconciliations",
        ],
        "Storage": ["schema_migrations"],
        "Webhooks": ["outbox_events", "webhook_endpoints", "webhook_deliveries", "webhook_attempts"],
    ]

    @Test func everyTableHasOneOwnerAndOnlyItNamesIt() throws {
        let owner = Dictionary(uniqueKeysWithValues: Self.owners.flatMap { module, tables in tables.map { ($0, module) } })
        var created = Set<String>()
        let migrations = repositoryRoot.appendingPathComponent("migrations")
        for file in FileManager.default.enumerator(at: migrations, includingPropertiesForKeys: nil)?.compactMap({ $0 as? URL }) ?? []
        where file.pathExtension == "sql" {
            let text = try String(contentsOf: file, encoding: .utf8)
            // In the order written: a rebuilt table (SQLite cannot alter a column in place) is created under a new name, the
            // old one dropped, the new one renamed.
            for match in text.matches(of: /(CREATE|DROP|ALTER) TABLE ([a-z0-9_]+)(?: RENAME TO ([a-z0-9_]+))?/) {
                let table = String(match.output.2)
                switch match.output.1 {
                case "CREATE": created.insert(table)
                case "DROP": created.remove(table)
                default:
                    if let renamed = match.output.3 {
                        created.remove(table)
                        created.insert(String(renamed))
                    }
                }
            }
        }
        #expect(created.subtracting(owner.keys).isEmpty, "tables without an owner: \(created.subtracting(owner.keys).sorted())")
        var trespasses: [String] = []
        let sources = repositoryRoot.appendingPathComponent("Sources")
        for file in FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)?.compactMap({ $0 as? URL }) ?? []
        where file.pathExtension == "swift" && !file.lastPathComponent.hasPrefix("Embedded") {
            let module = file.pathComponents[file.pathComponents.firstIndex(of: "Sources")! + 1]
            for match in try String(contentsOf: file, encoding: .utf8).matches(of: /\b(?:FROM|JOIN|INTO|UPDATE|TABLE)\s+([a-z_]+)/) {
                let table = String(match.output.1)
                if let tableOwner = owner[table], tableOwner != module {
                    trespasses.append("\(module)/\(file.lastPathComponent) uses \(table) (\(tableOwner)'s)")
                }
            }
        }
        #expect(trespasses.isEmpty, "\(trespasses)")
    }

    /// Tables with a store of their own (docs/architecture.md, "Stores"): only the store writes them; another statement of
    /// the module may read them in a join. A write elsewhere fails here.
    static let stores = [
        "sessions": "Auth/Sessions/SessionStore.swift", "users": "Auth/Users/UserStore.swift", "family_profiles": "Auth/Profiles/ProfileStore.swift",
        "api_keys": "Auth/APIKeys/APIKeyService.swift", "passkeys": "Auth/Passkeys/PasskeyStore.swift",
        "webauthn_used_challenges": "Auth/Passkeys/PasskeyStore.swift",
        "idempotency_records": "Ledger/Idempotency.swift", "purchase_requests": "Entitlements/PurchaseRequests.swift",
    ]

    @Test func tablesWithAStoreAreWrittenOnlyByIt() throws {
        var writers: [String] = []
        let sources = repositoryRoot.appendingPathComponent("Sources")
        for file in FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)?.compactMap({ $0 as? URL }) ?? []
        where file.pathExtension == "swift" && !file.lastPathComponent.hasPrefix("Embedded") {
            let relative = file.path.replacingOccurrences(of: sources.path + "/", with: "")
            for match in try String(contentsOf: file, encoding: .utf8).matches(of: /\b(?:INSERT INTO|UPDATE|DELETE FROM)\s+([a-z_]+)/) {
                if let store = Self.stores[String(match.output.1)], store != relative { writers.append("\(relative) writes \(match.output.1)") }
            }
        }
        #expect(writers.isEmpty, "\(writers)")
        for store in Set(Self.stores.values) {
            #expect(FileManager.default.fileExists(atPath: sources.appendingPathComponent(store).path), "\(store)")
        }
    }
}

extension ContractTests {
    /// `GET /openapi.yaml` serves exactly the repository's openapi.yaml (the compiled-in copy is regenerated by
    /// scripts/embed-resources).
    @Test func theServedSpecIsTheFile() throws {
        let file = try String(contentsOf: repositoryRoot.appendingPathComponent("openapi.yaml"), encoding: .utf8)
        #expect(OpenAPISpec.yaml == file, "run scripts/embed-resources")
    }
}

extension ContractTests {
    /// Path parameters are read only through `AppRequestContext.pathParameter`, which percent-decodes them: a controller
    /// that read `parameters` directly would answer 404 to a client that escapes `:` (issue 34).
    @Test func pathParametersAreReadDecoded() throws {
        var raw: [String] = []
        let sources = repositoryRoot.appendingPathComponent("Sources/AccountAPI")
        for file in FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)?.compactMap({ $0 as? URL }) ?? []
        where file.pathExtension == "swift" && file.lastPathComponent != "AppRequestContext.swift" {
            let text = try String(contentsOf: file, encoding: .utf8)
            if text.contains("parameters.require(") || text.contains("parameters.get(") { raw.append(file.lastPathComponent) }
        }
        #expect(raw.isEmpty, "read path parameters through context.pathParameter: \(raw)")
    }
}

extension ContractTests {
    /// Controllers never name each other (docs/architecture.md): what two of them share (session and sign-in bodies,
    /// an operator's view of a user, a grant's fields) lives in `HTTP/JSON`.
    @Test func controllersNeverNameEachOther() throws {
        // The API's controllers and the console's (whose files may be split as `Name+part.swift`).
        var files: [(own: String, text: String)] = []
        for folder in ["Sources/AccountAPI/Controllers", "Sources/AccountAPI/Console"] {
            let url = repositoryRoot.appendingPathComponent(folder)
            for file in try FileManager.default.contentsOfDirectory(atPath: url.path) where file.hasSuffix(".swift") {
                let own = String(file.dropLast(".swift".count).prefix(while: { $0 != "+" }))
                files.append((own, try String(contentsOf: url.appendingPathComponent(file), encoding: .utf8)))
            }
        }
        let names = Set(files.map(\.own).filter { $0.hasSuffix("Controller") })
        #expect(names.contains("AuthController") && names.contains("ConsoleUserController"))
        var crossings: [String] = []
        for (own, text) in files {
            for match in text.matches(of: /\b([A-Z][A-Za-z]*Controller)\b/) where names.contains(String(match.output.1)) && match.output.1 != own {
                crossings.append("\(own) names \(match.output.1)")
            }
        }
        #expect(crossings.isEmpty, "\(Set(crossings).sorted())")
    }
}

extension ContractTests {
    /// Timestamps come from the injected clock (`TimeSource`), so tests can move time and every node agrees with its
    /// database. The wall clock is read only where no business time is meant, each named here with why.
    static let wallClockReaders: [String: String] = [
        "Clock/TimeSource.swift": "the system clock itself",
        "Storage/Migration.swift": "when a migration was applied (operations, before any clock is wired)",
        "Mail/Mailer.swift": "a mail's Date header and file name (transport time)",
        "Media/BlobStore.swift": "a file's age, against the file system's modification times",
        "AccountAPI/Logging/JSONLogHandler.swift": "log line timestamps",
    ]

    @Test func onlyTheClockReadsTheTime() throws {
        let sources = repositoryRoot.appendingPathComponent("Sources")
        var readers: [String] = []
        for file in FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)?.compactMap({ $0 as? URL }) ?? []
        where file.pathExtension == "swift" && !file.path.contains("/Generated/") && !file.path.contains("/TestSupport/") {
            let relative = String(file.path.dropFirst(sources.path.count + 1))
            if try String(contentsOf: file, encoding: .utf8).contains("Date()"), Self.wallClockReaders[relative] == nil { readers.append(relative) }
        }
        #expect(readers.isEmpty, "read the time from the injected clock (TimeSource) instead: \(readers.sorted())")
    }

    /// Ids come from `FreshID` (Foundation's `UUID()` opens /dev/urandom on every call on Linux).
    @Test func idsComeFromFreshID() throws {
        let sources = repositoryRoot.appendingPathComponent("Sources")
        var makers: [String] = []
        for file in FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)?.compactMap({ $0 as? URL }) ?? []
        where file.pathExtension == "swift" && !file.path.contains("/Generated/") {
            let relative = String(file.path.dropFirst(sources.path.count + 1))
            if relative != "Clock/FreshID.swift", try String(contentsOf: file, encoding: .utf8).contains("UUID()") { makers.append(relative) }
        }
        #expect(makers.isEmpty, "make ids with FreshID instead: \(makers.sorted())")
    }
}

extension ContractTests {
    /// The engines stay behind the domain modules (docs/architecture.md): the HTTP layer never names an engine, a row,
    /// an executor or SQL; each operation's fastest path is chosen inside the module that owns it. Only the wiring
    /// (`App/`) hands modules the database and each other. And only Storage names PostgreSQL's types.
    @Test func enginesStayBehindTheDomainModules() throws {
        let sources = repositoryRoot.appendingPathComponent("Sources")
        let httpWords =
            /(PostgresDatabase|SQLiteDatabase|PostgresBatchedStatement|SQLRow|SQLExecutor|SQLValue|SQLFragment|SQLJoinFragment|\.engine[^A-Za-z]|quickQuery|"SELECT |"INSERT |"UPDATE |"DELETE FROM)/
        var found: [String] = []
        var httpFiles = 0
        for file in FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)?.compactMap({ $0 as? URL }) ?? []
        where file.pathExtension == "swift" && !file.path.contains("/Generated/") && !file.path.contains("/TestSupport/") {
            let relative = String(file.path.dropFirst(sources.path.count + 1))
            let text = try String(contentsOf: file, encoding: .utf8)
            if relative.hasPrefix("AccountAPI/Controllers/") || relative.hasPrefix("AccountAPI/HTTP/") {
                httpFiles += 1
                for match in text.matches(of: httpWords) { found.append("\(relative): \(match.output.1)") }
            }
            if !relative.hasPrefix("Storage/"), text.contains("PostgresDatabase") || text.contains("PostgresClient(") {
                found.append("\(relative): names PostgreSQL's types")
            }
        }
        #expect(httpFiles > 30, "the scan found the HTTP layer's files")
        #expect(found.isEmpty, "\(Set(found).sorted())")
    }
}

extension ContractTests {
    /// Nothing reachable with input traps (docs/security.md): no `try!`, `as!` or force unwrap in `Sources`. The one
    /// exception is a header name constant (`static let name = Self("Literal")!`), a literal that every test using it
    /// checks. Comments and the test-only `TestSupport` target are not scanned.
    @Test func nothingForceUnwraps() throws {
        let sources = repositoryRoot.appendingPathComponent("Sources")
        let force = /try!|as!|[\]\w)]!(?!=)/
        let headerName = /^\s*static let \w+ = Self\("[A-Za-z0-9-]+"\)!$/
        var found: [String] = []
        var scanned = 0
        for file in FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)?.compactMap({ $0 as? URL }) ?? []
        where file.pathExtension == "swift" && !file.path.contains("/Generated/") && !file.path.contains("/TestSupport/") {
            let relative = String(file.path.dropFirst(sources.path.count + 1))
            scanned += 1
            for (number, line) in try String(contentsOf: file, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false).enumerated()
            {
                let code =
                    line.trimmingCharacters(in: .whitespaces).hasPrefix("//") ? "" : String(line.split(separator: "//", maxSplits: 1).first ?? "")
                guard code.contains(force), !code.contains(headerName) else { continue }
                found.append("\(relative):\(number + 1): \(code.trimmingCharacters(in: .whitespaces))")
            }
        }
        #expect(scanned > 100, "the scan found the sources")
        #expect(found.isEmpty, "\(found.joined(separator: "\n"))")
    }
}
