import Auth
import Entitlements
import Foundation
import NIOCore
import Logging
import Storage

/// Everything the service reads from the environment, parsed and validated once at start-up.
/// Handlers never read the environment. `description` never prints secrets.
public struct AppConfig: Sendable, CustomStringConvertible {
    public var host = "127.0.0.1"
    public var port = 8080
    var database = DatabaseLocation.sqlite(path: "data/account-service.sqlite")
    public var plansFile = "plans.json"
    var mailTransport = MailTransport.log
    var mailFrom = "Account Service <no-reply@localhost>"
    public var logLevel = Logger.Level.info
    public var logFormat = LogFormat.text
    /// Where generated secrets (the server HMAC key) live when not given in the environment.
    var dataDirectory = "data"
    /// Server secret for OTP HMACs, from `SERVER_SECRET` (hex or text, ≥ 32 bytes) or `data/server-secret`.
    var serverSecret: String?
    /// Argon2id cost (DESIGN.md defaults); `ARGON2_MEMORY_KIB`, `ARGON2_ITERATIONS`, `ARGON2_PARALLELISM`.
    public var argon2 = Argon2Parameters.owasp
    /// Hashing threads (`ARGON2_THREADS`, default: cores) and how many hashes may wait (`ARGON2_QUEUE_LIMIT`).
    var argon2Threads = System.coreCount
    var argon2QueueLimit = 64
    /// Seconds between background ledger sweeps (`SWEEP_INTERVAL_SECONDS`; 0 turns the sweeper off).
    var sweepIntervalSeconds: Double = 5
    /// How long a request waits for a PostgreSQL connection before a 503 (`DATABASE_LEASE_TIMEOUT_SECONDS`).
    var databaseLeaseTimeoutSeconds: Double = 2
    /// PostgreSQL: one-shot spends as one statement (`LEDGER_ONE_STATEMENT_SPEND=false` → the transactional path only).
    var oneStatementSpends = true

    /// The auth flows' limits; `MAIL_COOLDOWN_SECONDS`, `MAIL_SENDS_PER_HOUR` and `IP_HASHES_PER_MINUTE` set the tunable ones.
    var authPolicy = AuthPolicy()
    /// Proxies whose `X-Forwarded-For` names the client (`TRUSTED_PROXIES`, comma-separated CIDRs); none by default.
    var trustedProxies = TrustedProxies.none
    /// Bearer token for `GET /metrics` (`METRICS_TOKEN`); unset → the route answers 404.
    var metricsToken: String?

    /// Apple billing (`APPLE_ROOT_CERTIFICATES`, `APPLE_BUNDLE_ID`, `APPLE_APP_APPLE_ID`, `APPLE_ENVIRONMENT`,
    /// `APPLE_ACCEPT_SANDBOX`); nil → the Apple endpoints answer 503.
    var apple: AppleSettings?
    /// Stripe webhook endpoint secrets (`STRIPE_WEBHOOK_SECRET`, comma-separated for rotation); empty → 503.
    var stripeWebhookSecrets: [String] = []

    struct AppleSettings: Sendable {
        var rootCertificatePaths: [String]
        var bundleID: String
        var appAppleID: Int64?
        var environment: AppleEnvironment
        var acceptSandbox: Bool
    }

    public enum LogFormat: String, Sendable { case text, json }

    public init() {}

    /// Parses `environment`, collecting every problem before failing.
    public static func from(environment env: [String: String]) throws(ConfigError) -> AppConfig {
        var config = AppConfig()
        var problems: [String] = []
        func value(_ key: String) -> String? {
            guard let v = env[key]?.trimmingCharacters(in: .whitespaces), !v.isEmpty else { return nil }
            return v
        }
        if let host = value("HOST") { config.host = host }
        if let port = value("PORT") {
            if let p = Int(port), (0...65535).contains(p) { config.port = p } else { problems.append("PORT must be a number from 0 to 65535") }
        }
        do { config.database = try DatabaseLocation.parse(value("DATABASE_URL")) } catch {
            problems.append("DATABASE_URL: \(error)")  // StorageError.invalidURL never echoes the URL (it may hold a password)
        }
        if let plans = value("PLANS_FILE") { config.plansFile = plans }
        do { config.mailTransport = try MailTransport.parse(value("MAIL_TRANSPORT")) } catch { problems.append(error.description) }
        if let from = value("MAIL_FROM") { config.mailFrom = from }
        if let level = value("LOG_LEVEL") {
            if let l = Logger.Level(rawValue: level.lowercased()) { config.logLevel = l } else {
                problems.append("LOG_LEVEL must be one of trace, debug, info, notice, warning, error, critical")
            }
        }
        if let format = value("LOG_FORMAT") {
            if let f = LogFormat(rawValue: format.lowercased()) { config.logFormat = f } else { problems.append("LOG_FORMAT must be text or json") }
        }
        if let dir = value("DATA_DIR") { config.dataDirectory = dir }
        if let secret = value("SERVER_SECRET") {
            if secret.utf8.count < 32 { problems.append("SERVER_SECRET must be at least 32 characters") } else { config.serverSecret = secret }
        }
        func number(_ key: String, _ range: ClosedRange<Int>) -> Int? {
            guard let raw = value(key) else { return nil }
            guard let n = Int(raw), range.contains(n) else {
                problems.append("\(key) must be a whole number from \(range.lowerBound) to \(range.upperBound)")
                return nil
            }
            return n
        }
        if let m = number("ARGON2_MEMORY_KIB", 8...4_194_304) { config.argon2.memoryKiB = UInt32(m) }
        if let t = number("ARGON2_ITERATIONS", 1...100) { config.argon2.iterations = UInt32(t) }
        if let p = number("ARGON2_PARALLELISM", 1...64) { config.argon2.parallelism = UInt32(p) }
        if let n = number("ARGON2_THREADS", 1...256) { config.argon2Threads = n }
        if let n = number("ARGON2_QUEUE_LIMIT", 0...100_000) { config.argon2QueueLimit = n }
        if let n = number("SWEEP_INTERVAL_SECONDS", 0...86400) { config.sweepIntervalSeconds = Double(n) }
        if let n = number("DATABASE_LEASE_TIMEOUT_SECONDS", 1...600) { config.databaseLeaseTimeoutSeconds = Double(n) }
        switch value("LEDGER_ONE_STATEMENT_SPEND") {
        case nil, "true": break
        case "false": config.oneStatementSpends = false
        default: problems.append("LEDGER_ONE_STATEMENT_SPEND must be true or false")
        }
        if let n = number("MAIL_COOLDOWN_SECONDS", 0...3600) { config.authPolicy.mailCooldownSeconds = Double(n) }
        if let n = number("MAIL_SENDS_PER_HOUR", 1...1000) { config.authPolicy.mailSendsPerHourMax = n }
        if let n = number("IP_HASHES_PER_MINUTE", 1...1_000_000) { config.authPolicy.ipHashesPerMinute = n }
        if let proxies = value("TRUSTED_PROXIES") {
            switch TrustedProxies.parse(proxies) {
            case .success(let parsed): config.trustedProxies = parsed
            case .failure(let invalid): problems.append("TRUSTED_PROXIES: '\(invalid.entry)' is not an IP address or CIDR (e.g. 10.0.0.0/8, ::1/128)")
            }
        }
        if let token = value("METRICS_TOKEN") {
            if token.utf8.count < 16 { problems.append("METRICS_TOKEN must be at least 16 characters") } else { config.metricsToken = token }
        }
        config.apple = appleSettings(value, &problems)
        if let secrets = value("STRIPE_WEBHOOK_SECRET") {
            config.stripeWebhookSecrets = secrets.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            if config.stripeWebhookSecrets.contains(where: { $0.utf8.count < 16 }) {
                problems.append("STRIPE_WEBHOOK_SECRET: each secret must be at least 16 characters (Stripe's are whsec_…)")
            }
        }
        if case .postgres = config.database, config.serverSecret == nil {
            problems.append("SERVER_SECRET is required with PostgreSQL (every node must share it; e.g. openssl rand -hex 32)")
        }
        guard problems.isEmpty else { throw ConfigError(problems: problems) }
        return config
    }

    /// All of the Apple settings or none of them.
    static func appleSettings(_ value: (String) -> String?, _ problems: inout [String]) -> AppleSettings? {
        let keys = ["APPLE_ROOT_CERTIFICATES", "APPLE_BUNDLE_ID", "APPLE_APP_APPLE_ID", "APPLE_ENVIRONMENT", "APPLE_ACCEPT_SANDBOX"]
        guard keys.contains(where: { value($0) != nil }) else { return nil }
        let roots = value("APPLE_ROOT_CERTIFICATES")?.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty } ?? []
        if roots.isEmpty { problems.append("APPLE_ROOT_CERTIFICATES is required for Apple billing (paths to PEM or DER, e.g. AppleRootCA-G3.cer)") }
        let bundle = value("APPLE_BUNDLE_ID")
        if bundle == nil { problems.append("APPLE_BUNDLE_ID is required for Apple billing") }
        let environment = value("APPLE_ENVIRONMENT").flatMap(AppleEnvironment.init(rawValue:))
        if environment == nil { problems.append("APPLE_ENVIRONMENT must be Production or Sandbox") }
        var appID: Int64?
        if let raw = value("APPLE_APP_APPLE_ID") {
            if let n = Int64(raw), n > 0 { appID = n } else { problems.append("APPLE_APP_APPLE_ID must be the app's numeric Apple ID") }
        } else if environment == .production {
            problems.append("APPLE_APP_APPLE_ID is required with APPLE_ENVIRONMENT=Production")
        }
        var acceptSandbox = false
        if let raw = value("APPLE_ACCEPT_SANDBOX") {
            switch raw.lowercased() {
            case "true", "1", "yes": acceptSandbox = true
            case "false", "0", "no": acceptSandbox = false
            default: problems.append("APPLE_ACCEPT_SANDBOX must be true or false")
            }
            if acceptSandbox && environment != .production { problems.append("APPLE_ACCEPT_SANDBOX only applies with APPLE_ENVIRONMENT=Production") }
        }
        guard let bundle, let environment, !roots.isEmpty else { return nil }
        return AppleSettings(rootCertificatePaths: roots, bundleID: bundle, appAppleID: appID, environment: environment, acceptSandbox: acceptSandbox)
    }

    public var description: String {
        let db: String =
            switch database {
            case .sqlite(let path): "sqlite:\(path)"
            case .postgres: "postgres (credentials hidden)"
            }
        return "host=\(host) port=\(port) database=\(db) plans=\(plansFile) log=\(logLevel)/\(logFormat.rawValue) argon2=\(argon2) secret=\(serverSecret == nil ? "file" : "env") apple=\(apple.map { "\($0.environment.rawValue)\($0.acceptSandbox ? "+sandbox" : "")" } ?? "off") stripe=\(stripeWebhookSecrets.isEmpty ? "off" : "\(stripeWebhookSecrets.count) secret(s)") proxies=\(trustedProxies.networks.count) metrics=\(metricsToken == nil ? "off" : "token")"
    }
}

/// Every configuration problem, listed together.
public struct ConfigError: Error, CustomStringConvertible {
    public let problems: [String]
    public var description: String { "invalid configuration:\n" + problems.map { "  - \($0)" }.joined(separator: "\n") }
}
