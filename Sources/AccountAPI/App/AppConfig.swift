import Auth
import Billing
import Entitlements
import Foundation
import Logging
import Mail
import NIOCore
import Storage
import WebAuthn
import Webhooks

/// Everything the service reads from the environment, parsed and validated once at start-up.
/// Handlers never read the environment. `description` never prints secrets.
public struct AppConfig: Sendable, CustomStringConvertible {
    public var host = "127.0.0.1"
    public var port = 8080
    var database = DatabaseLocation.sqlite(path: "data/account-service.sqlite")
    /// The plan catalog file (`PLANS_FILE`); nil → the compiled-in copy of the repository's `plans.json`.
    public var plansFile: String?
    var mailTransport = MailTransport.log
    var mailFrom = "Account Service <no-reply@localhost>"
    public var logLevel = Logger.Level.info
    public var logFormat = LogFormat.text
    /// Where generated secrets (the server HMAC key) live when not given in the environment.
    var dataDirectory = "data"
    /// Prefix of media URLs: the service's own `/media` or a CDN in front of it (`MEDIA_BASE_URL`).
    var mediaBaseURL = "/media"
    /// Each user's allowance for their own sticker uploads.
    var stickerUploads = UploadAllowance()
    /// Server secret for OTP HMACs, from `SERVER_SECRET` (hex or text, ≥ 32 bytes) or `data/server-secret`.
    var serverSecret: String?
    /// Argon2id cost (DESIGN.md defaults); `ARGON2_MEMORY_KIB`, `ARGON2_ITERATIONS`, `ARGON2_PARALLELISM`.
    public var argon2 = Argon2Parameters.owasp
    /// Hashing threads (`ARGON2_THREADS`, default: cores) and how many hashes may wait (`ARGON2_QUEUE_LIMIT`).
    var argon2Threads = System.coreCount
    var argon2QueueLimit = 64
    /// A connection that sends nothing for this long, idle or with a request half sent, is closed
    /// (`HTTP_IDLE_TIMEOUT_SECONDS`).
    var httpIdleTimeoutSeconds = 30
    /// What request bodies still arriving may hold (``BodyBudget``): in all (`HTTP_BODY_BUFFER_MIB`, default 256), per
    /// client address at once (`HTTP_BODY_READS_PER_CLIENT`, default 32), and how long such a body may take to
    /// arrive (`HTTP_BODY_TIMEOUT_SECONDS`, default 60).
    var httpBodyBufferMiB = 256
    var httpBodyReadsPerClient = 32
    var httpBodyTimeoutSeconds = 60
    /// Connections one client (an IPv4 address or an IPv6 /64, not a trusted proxy) may hold open at once
    /// (`HTTP_CONNECTIONS_PER_CLIENT`, default 256; ``ClientConnections``).
    var httpConnectionsPerClient = 256
    /// Seconds between background ledger sweeps (`SWEEP_INTERVAL_SECONDS`; 0 turns the sweeper off).
    var sweepIntervalSeconds: Double = 5
    /// How long a request waits for a PostgreSQL connection before a 503 (`DATABASE_LEASE_TIMEOUT_SECONDS`).
    var databaseLeaseTimeoutSeconds: Double = 2
    /// PostgreSQL's connection pool (`DATABASE_POOL_MAX_CONNECTIONS`, default 10; `DATABASE_POOL_MIN_CONNECTIONS`, default 0,
    /// equal to the maximum for a fixed pool; `DATABASE_KEEPALIVE_SECONDS`, default 0: none; `DATABASE_LOCK_TIMEOUT_SECONDS`,
    /// default 30, which SQLite's writer follows too).
    public var databasePool = PostgresPoolSettings.server
    /// SQLite: how much of the file its two quick readers map into memory (`SQLITE_MMAP_MIB`; 0: none, every page read).
    var sqliteMapMiB = SQLiteDatabase.defaultMapMiB
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
    /// The App Store Server API (`APPLE_API_*`; nil → consumption answers, reconciliation and offer signatures are off).
    var appleAPI: AppleAPISettings?
    /// Webhooks out: URL policy, retries, timeouts (`WEBHOOKS_*`, `WEBHOOK_*`).
    var webhooks = WebhookSettings()
    /// Whether this node runs the delivery worker (`WEBHOOK_WORKER`, default true; every node may).
    var webhookWorker = true

    /// Sign in with Apple: the app's bundle and service ids (`SIGN_IN_WITH_APPLE_CLIENT_IDS`; empty → off, 404) and the
    /// key set's URL (`SIGN_IN_WITH_APPLE_JWKS_URL`, default Apple's).
    var appleSignInClientIDs: Set<String> = []
    var appleSignInJWKSURL = "https://appleid.apple.com/auth/keys"
    /// Passkeys: the relying party (`WEBAUTHN_RP_ID`; unset → the passkey endpoints answer 404), its origins
    /// (`WEBAUTHN_ORIGINS`, default `https://<rp id>`) and the name authenticators show (`WEBAUTHN_RP_NAME`).
    var relyingParty: RelyingParty?
    /// `REQUIRE_ADMIN_MFA=true`: admin sessions act as operators only after a TOTP code (set it in production).
    var requireAdminMFA = false
    /// `CONSOLE_ENABLED=true`: serve the operator console at `/console` (admins only; off by default).
    public var consoleEnabled = false
    /// Scheduled backups inside `serve` (SQLite only): `BACKUP_DIR`, `BACKUP_EVERY`, `BACKUP_KEEP`.
    var backups: BackupSchedule?
    /// How long a graceful shutdown (SIGTERM) waits for requests in flight before it cancels them.
    var shutdownGraceSeconds = 25
    /// OpenTelemetry traces: an OTLP endpoint is set (swift-otel reads the rest of `OTEL_*` itself).
    var tracesEnabled = false
    /// The name authenticator apps show for TOTP entries (`TOTP_ISSUER`).
    var totpIssuer = "Account Service"

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
        var reader = EnvironmentReader(env: env)
        var config = AppConfig()
        config.readServer(&reader)
        config.readTuning(&reader)
        config.readIntegrations(&reader)
        config.readWebhooks(&reader)
        config.readOperations(&reader)
        config.readPasskeys(&reader)
        config.readAppleAPI(&reader)
        if case .postgres = config.database, config.serverSecret == nil {
            reader.problems.append("SERVER_SECRET is required with PostgreSQL (every node must share it; e.g. openssl rand -hex 32)")
        }
        guard reader.problems.isEmpty else { throw ConfigError(problems: reader.problems) }
        return config
    }

    /// Listening, storage, mail, logs and the server secret.
    mutating func readServer(_ reader: inout EnvironmentReader) {
        if let host = reader.value("HOST") { self.host = host }
        if let port = reader.number("PORT", 0...65535) { self.port = port }
        do { database = try DatabaseLocation.parse(reader.value("DATABASE_URL")) } catch {
            reader.problems.append("DATABASE_URL: \(error)")  // StorageError.invalidURL never echoes the URL (it may hold a password)
        }
        if let plans = reader.value("PLANS_FILE") { plansFile = plans }
        do { mailTransport = try MailTransport.parse(reader.value("MAIL_TRANSPORT")) } catch { reader.problems.append(error.description) }
        if let from = reader.value("MAIL_FROM") { mailFrom = from }
        if let level = reader.value("LOG_LEVEL") {
            if let l = Logger.Level(rawValue: level.lowercased()) {
                logLevel = l
            } else {
                reader.problems.append("LOG_LEVEL must be one of trace, debug, info, notice, warning, error, critical")
            }
        }
        if let format = reader.value("LOG_FORMAT") {
            if let f = LogFormat(rawValue: format.lowercased()) { logFormat = f } else { reader.problems.append("LOG_FORMAT must be text or json") }
        }
        if let dir = reader.value("DATA_DIR") { dataDirectory = dir }
        if let n = reader.number("STICKER_UPLOADS_PER_USER", 0...100_000) { stickerUploads.maxStickers = n }
        if let n = reader.number("STICKER_UPLOAD_BYTES_PER_USER", 0...10_737_418_240) { stickerUploads.maxBytes = n }
        if let base = reader.value("MEDIA_BASE_URL") {
            if base.hasPrefix("https://") || base.hasPrefix("http://") || base.hasPrefix("/") {
                mediaBaseURL = base.hasSuffix("/") ? String(base.dropLast()) : base
            } else {
                reader.problems.append("MEDIA_BASE_URL must be an http(s) URL or a path starting with /")
            }
        }
        if let secret = reader.value("SERVER_SECRET") {
            if secret.utf8.count < 32 { reader.problems.append("SERVER_SECRET must be at least 32 characters") } else { serverSecret = secret }
        }
    }

    /// Argon2, the sweeper, the pool, the spend path and the auth limits.
    mutating func readTuning(_ reader: inout EnvironmentReader) {
        if let m = reader.number("ARGON2_MEMORY_KIB", 8...4_194_304) { argon2.memoryKiB = UInt32(m) }
        if let t = reader.number("ARGON2_ITERATIONS", 1...100) { argon2.iterations = UInt32(t) }
        if let p = reader.number("ARGON2_PARALLELISM", 1...64) { argon2.parallelism = UInt32(p) }
        if let n = reader.number("ARGON2_THREADS", 1...256) { argon2Threads = n }
        if let n = reader.number("ARGON2_QUEUE_LIMIT", 0...100_000) { argon2QueueLimit = n }
        if let n = reader.number("SWEEP_INTERVAL_SECONDS", 0...86400) { sweepIntervalSeconds = Double(n) }
        if let n = reader.number("HTTP_IDLE_TIMEOUT_SECONDS", 1...3600) { httpIdleTimeoutSeconds = n }
        if let n = reader.number("HTTP_BODY_BUFFER_MIB", 16...65_536) { httpBodyBufferMiB = n }
        if let n = reader.number("HTTP_BODY_READS_PER_CLIENT", 1...100_000) { httpBodyReadsPerClient = n }
        if let n = reader.number("HTTP_BODY_TIMEOUT_SECONDS", 1...3600) { httpBodyTimeoutSeconds = n }
        if let n = reader.number("HTTP_CONNECTIONS_PER_CLIENT", 1...100_000) { httpConnectionsPerClient = n }
        if let n = reader.number("DATABASE_LEASE_TIMEOUT_SECONDS", 1...600) { databaseLeaseTimeoutSeconds = Double(n) }
        if let n = reader.number("DATABASE_POOL_MAX_CONNECTIONS", 1...PostgresPoolSettings.connectionsLimit) { databasePool.maximumConnections = n }
        if let n = reader.number("DATABASE_POOL_MIN_CONNECTIONS", 0...PostgresPoolSettings.connectionsLimit) {
            if n <= databasePool.maximumConnections {
                databasePool.minimumConnections = n
            } else {
                reader.problems.append(
                    "DATABASE_POOL_MIN_CONNECTIONS (\(n)) must not exceed DATABASE_POOL_MAX_CONNECTIONS (\(databasePool.maximumConnections))")
            }
        }
        if let n = reader.number("DATABASE_KEEPALIVE_SECONDS", 0...3600) { databasePool.keepAliveSeconds = Int64(n) }
        if let n = reader.number("DATABASE_LOCK_TIMEOUT_SECONDS", 0...3600) { databasePool.lockTimeoutSeconds = Int64(n) }
        if let n = reader.number("SQLITE_MMAP_MIB", 0...SQLiteDatabase.maximumMapMiB) { sqliteMapMiB = n }
        if let flag = reader.flag("LEDGER_ONE_STATEMENT_SPEND") { oneStatementSpends = flag }
        if let n = reader.number("MAIL_COOLDOWN_SECONDS", 0...3600) { authPolicy.mailCooldownSeconds = Double(n) }
        if let n = reader.number("MAIL_SENDS_PER_HOUR", 1...1000) { authPolicy.mailSendsPerHourMax = n }
        if let n = reader.number("IP_HASHES_PER_MINUTE", 1...1_000_000) { authPolicy.ipHashesPerMinute = n }
    }

    /// Proxies, metrics and the billing providers.
    mutating func readIntegrations(_ reader: inout EnvironmentReader) {
        if let proxies = reader.value("TRUSTED_PROXIES") {
            switch TrustedProxies.parse(proxies) {
            case .success(let parsed): trustedProxies = parsed
            case .failure(let invalid):
                reader.problems.append("TRUSTED_PROXIES: '\(invalid.entry)' is not an IP address or CIDR (e.g. 10.0.0.0/8, ::1/128)")
            }
        }
        if let token = reader.value("METRICS_TOKEN") {
            if token.utf8.count < 16 { reader.problems.append("METRICS_TOKEN must be at least 16 characters") } else { metricsToken = token }
        }
        let environment = reader
        apple = Self.appleSettings({ environment.value($0) }, &reader.problems)
        if let secrets = reader.value("STRIPE_WEBHOOK_SECRET") {
            stripeWebhookSecrets = secrets.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            if stripeWebhookSecrets.contains(where: { $0.utf8.count < 16 }) {
                reader.problems.append("STRIPE_WEBHOOK_SECRET: each secret must be at least 16 characters (Stripe's are whsec_…)")
            }
        }
    }

    /// Webhooks out.
    mutating func readWebhooks(_ reader: inout EnvironmentReader) {
        if let flag = reader.flag("WEBHOOKS_ALLOW_HTTP") { webhooks.urlPolicy.allowHTTP = flag }
        if let networks = reader.value("WEBHOOKS_ALLOWED_NETWORKS") {
            switch TrustedProxies.parse(networks) {
            case .success(let parsed): webhooks.urlPolicy.allowedNetworks = parsed.networks
            case .failure(let invalid): reader.problems.append("WEBHOOKS_ALLOWED_NETWORKS: '\(invalid.entry)' is not an IP address or CIDR")
            }
        }
        if let n = reader.number("WEBHOOK_RETRY_BASE_MS", 1...3_600_000) { webhooks.retryBaseSeconds = Double(n) / 1000 }
        if let n = reader.number("WEBHOOK_RETRY_HOURS", 1...720) { webhooks.retryWindowSeconds = Double(n) * 3600 }
        if let n = reader.number("WEBHOOK_POLL_MS", 10...60_000) { webhooks.pollSeconds = Double(n) / 1000 }
        if let n = reader.number("WEBHOOK_TIMEOUT_SECONDS", 1...60) { webhooks.timeoutSeconds = Double(n) }
        if let n = reader.number("WEBHOOK_MAX_IN_FLIGHT", 1...256) { webhooks.maxInFlight = n }
        if let flag = reader.flag("WEBHOOK_WORKER") { webhookWorker = flag }
        if let ids = reader.value("SIGN_IN_WITH_APPLE_CLIENT_IDS") {
            appleSignInClientIDs = Set(ids.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty })
        }
        if let flag = reader.flag("REQUIRE_ADMIN_MFA") { requireAdminMFA = flag }
        if let flag = reader.flag("CONSOLE_ENABLED") { consoleEnabled = flag }
        if let issuer = reader.value("TOTP_ISSUER") {
            if issuer.utf8.count <= 64, !issuer.contains(":") {
                totpIssuer = issuer
            } else {
                reader.problems.append("TOTP_ISSUER must be at most 64 bytes, without ':'")
            }
        }
        if let url = reader.value("SIGN_IN_WITH_APPLE_JWKS_URL") {
            if url.hasPrefix("https://") || url.hasPrefix("http://") {
                appleSignInJWKSURL = url
            } else {
                reader.problems.append("SIGN_IN_WITH_APPLE_JWKS_URL must be an http(s) URL")
            }
        }
    }

    /// Running it: scheduled backups and the shutdown bound.
    mutating func readOperations(_ reader: inout EnvironmentReader) {
        if let n = reader.number("SHUTDOWN_GRACE_SECONDS", 1...3600) { shutdownGraceSeconds = n }
        let endpoint = reader.value("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") ?? reader.value("OTEL_EXPORTER_OTLP_ENDPOINT")
        tracesEnabled = endpoint != nil && reader.value("OTEL_SDK_DISABLED")?.lowercased() != "true" && reader.value("OTEL_TRACES_EXPORTER") != "none"
        let every = reader.duration("BACKUP_EVERY", 5...(30 * 86400))
        let keep = reader.number("BACKUP_KEEP", 1...1000)
        guard let directory = reader.value("BACKUP_DIR") else {
            if every != nil || keep != nil { reader.problems.append("BACKUP_EVERY and BACKUP_KEEP need BACKUP_DIR") }
            return
        }
        if case .postgres = database {
            reader.problems.append("BACKUP_DIR backs up the embedded SQLite database; back PostgreSQL up with its own tools (docs/operations.md)")
        }
        backups = BackupSchedule(directory: directory, everySeconds: every ?? 86400, keep: keep ?? 7)
    }

    /// All of the Apple settings or none of them.
    static func appleSettings(_ value: (String) -> String?, _ problems: inout [String]) -> AppleSettings? {
        let keys = ["APPLE_ROOT_CERTIFICATES", "APPLE_BUNDLE_ID", "APPLE_APP_APPLE_ID", "APPLE_ENVIRONMENT", "APPLE_ACCEPT_SANDBOX"]
        guard keys.contains(where: { value($0) != nil }) else { return nil }
        let roots =
            value("APPLE_ROOT_CERTIFICATES")?.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty } ?? []
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
        return
            "host=\(host) port=\(port) database=\(db) plans=\(plansFile ?? "built-in") log=\(logLevel)/\(logFormat.rawValue) argon2=\(argon2) secret=\(serverSecret == nil ? "file" : "env") apple=\(apple.map { "\($0.environment.rawValue)\($0.acceptSandbox ? "+sandbox" : "")" } ?? "off") stripe=\(stripeWebhookSecrets.isEmpty ? "off" : "\(stripeWebhookSecrets.count) secret(s)") proxies=\(trustedProxies.networks.count) metrics=\(metricsToken == nil ? "off" : "token") webhooks=\(webhookWorker ? "worker" : "no-worker")\(webhooks.urlPolicy.allowHTTP ? "+http" : "")"
    }
}

/// Reads settings from the environment (trimmed; empty means unset), collecting every problem.
struct EnvironmentReader {
    let env: [String: String]
    var problems: [String] = []

    func value(_ key: String) -> String? {
        guard let v = env[key]?.trimmingCharacters(in: .whitespaces), !v.isEmpty else { return nil }
        return v
    }

    mutating func number(_ key: String, _ range: ClosedRange<Int>) -> Int? {
        guard let raw = value(key) else { return nil }
        guard let n = Int(raw), range.contains(n) else {
            problems.append("\(key) must be a whole number from \(range.lowerBound) to \(range.upperBound)")
            return nil
        }
        return n
    }

    /// Seconds, written as a number with a unit: `90s`, `30m`, `6h`, `1d` (a bare number is seconds).
    mutating func duration(_ key: String, _ range: ClosedRange<Int>) -> Int? {
        guard let raw = value(key)?.lowercased() else { return nil }
        let units: [Character: Int] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
        let unit = raw.last.flatMap { units[$0] }
        let digits = unit == nil ? Substring(raw) : raw.dropLast()
        guard digits.count <= 9, let n = Int(digits), case let (seconds, overflow) = n.multipliedReportingOverflow(by: unit ?? 1), !overflow,
            range.contains(seconds)
        else {
            problems.append("\(key) must be a duration such as 30m, 6h or 1d, from \(range.lowerBound) s to \(range.upperBound / 86400) days")
            return nil
        }
        return seconds
    }

    mutating func flag(_ key: String) -> Bool? {
        switch value(key)?.lowercased() {
        case nil: return nil
        case "true": return true
        case "false": return false
        default:
            problems.append("\(key) must be true or false")
            return nil
        }
    }
}

/// Where and how often `serve` copies its SQLite database, and how many copies it keeps.
struct BackupSchedule: Sendable {
    var directory: String
    var everySeconds: Int
    var keep: Int
}

/// Every configuration problem, listed together.
public struct ConfigError: Error, CustomStringConvertible {
    public let problems: [String]
    public var description: String { "invalid configuration:\n" + problems.map { "  - \($0)" }.joined(separator: "\n") }
}
