import AppStoreServer
import AsyncHTTPClient
import Auth
import Billing
import Clock
import Entitlements
import Foundation
import Identity
import Ledger
import Logging
import Mail
import Media
import PostgresNIO
import Secrets
import Storage
import Webhooks
import X509

/// Every service, built once from the configuration (or by tests): store → service → controller, injected by hand.
public struct Dependencies: Sendable {
    public let config: AppConfig
    public let database: any Database
    let catalog: PlanCatalog
    let mailer: any Mailer
    /// Where every mail waits for the answer to go out first (``MailQueue``); tests flush it.
    public let mailQueue: MailQueue
    let clock: any TimeSource
    /// The PostgreSQL pool, when that is the engine: the application runs it as a service.
    public let postgresHosts: PostgresHosts?
    /// The Argon2 pool (a service: its threads stop with the app).
    let hasher: PasswordHasher
    public let auth: AuthService
    public let apiKeys: APIKeyService
    let profiles: ProfileService
    public let ledger: LedgerService
    let entitlements: EntitlementService
    let subscriptions: SubscriptionService
    let stickers: StickerService
    let stickerContent: StickerContentService
    let media: MediaServices
    let billing: BillingService
    public let webhooks: WebhookService
    /// Seals endpoint secrets (the worker opens them to sign).
    let secretBox: SecretBox
    /// Sign in with Apple's token verifier (nil: not configured).
    let appleSignIn: AppleIdentityVerifier?
    /// Passkeys (nil: `WEBAUTHN_RP_ID` not set).
    let passkeys: PasskeyService?
    /// The App Store Server API and the StoreKit offer signer (nil: `APPLE_API_*` not set).
    let appStore: AppStoreServerClient?
    let offers: AppleOfferSigner?
    /// Set when SIGTERM starts the drain (``DrainState``).
    let drain = DrainState()
    /// What request bodies still arriving may hold (``BodyBudget``).
    let bodies: BodyBudget
    /// Connections open per client (``ClientConnections``).
    let connections: ClientConnections

    /// Opens the configured engine and loads the plan catalog. Nothing is migrated yet.
    public static func make(
        config: AppConfig, clock: any TimeSource = SystemTimeSource(), mailer: (any Mailer)? = nil, logger: Logger
    ) async throws
        -> Dependencies
    {
        let catalog: PlanCatalog
        do { catalog = try config.plansFile.map { try PlanCatalog.load(path: $0) } ?? PlanCatalog.builtIn } catch {
            throw StartupError(message: "\(error)")
        }
        // Everything that can fail on bad configuration comes before the database opens (nothing to close on failure).
        let apple = try appleVerifier(config, clock: clock)
        let appStore = try await appStoreServer(config, clock: clock)
        let (database, postgresHosts) = try await open(config, logger: logger)
        let mailQueue = MailQueue(transport: mailer ?? config.mailTransport.makeMailer(from: config.mailFrom), logger: logger)
        let mailer = QueuedMailer(queue: mailQueue)
        let hasher = try PasswordHasher(parameters: config.argon2, threads: config.argon2Threads, queueLimit: config.argon2QueueLimit)
        let secret = try serverSecret(config)
        let secrets = SecretHasher(serverSecret: secret)
        let media = try mediaServices(config, secret: secret, clock: clock)
        let outbox = Outbox()
        let box = SecretBox(serverSecret: secret)
        let ledger = Ledger(clock: clock, events: outbox)
        let store = SubscriptionStore(catalog: catalog)
        let packs = StickerPackStore(catalog: catalog, clock: clock, events: outbox)
        let stickerContent = StickerContentService(
            database: database, packs: packs, subscriptions: store, audit: AuditLog.shared, clock: clock, allowance: config.stickerUploads,
            images: media)
        let machine = SubscriptionMachine(store: store, ledger: ledger, clock: clock, audit: AuditLog.shared, events: outbox)
        let auth = AuthService(
            database: database, hasher: hasher, secrets: secrets, mailer: mailer, clock: clock, policy: config.authPolicy,
            welcome: LedgerWelcomeTokenGrant(ledger: ledger), welcomeTokens: catalog.welcomeTokens,
            erasure: ErasureOfLedgerAndStickers(ledger: ledger, subscriptions: machine, stickerContent: stickerContent),
            events: outbox)
        let idempotency = IdempotencyStore(clock: clock)
        let apiKeys = APIKeyService(database: database, clock: clock)
        let billing = billingService(config, database: database, machine: machine, apple: apple, clock: clock)
        return Dependencies(
            config: config, database: database, catalog: catalog, mailer: mailer, mailQueue: mailQueue, clock: clock, postgresHosts: postgresHosts,
            hasher: hasher,
            auth: auth,
            apiKeys: apiKeys,
            profiles: ProfileService(
                database: database, hasher: hasher, clock: clock, policy: config.authPolicy, passwords: auth.passwords,
                limits: CatalogProfileLimits(subscriptions: store), deletion: PurchaseRequestsOfDeletedProfiles(ledger: ledger)),
            ledger: LedgerService(
                database: database, ledger: ledger, idempotency: idempotency, users: AuthDirectory(), audit: AuditLog.shared, clock: clock,
                callerKeys: LedgerCallerKeysOfAuth(apiKeys: apiKeys), oneStatementSpends: config.oneStatementSpends),
            entitlements: EntitlementService(
                database: database, subscriptions: store, packs: packs, ledger: ledger, accounts: AuthDirectory(), clock: clock,
                notifier: OwnerPurchaseMail(auth: auth)),
            subscriptions: SubscriptionService(database: database, machine: machine, accounts: AuthDirectory()),
            stickers: StickerService(
                database: database, packs: packs, subscriptions: store, ledger: ledger, idempotency: idempotency, audit: AuditLog.shared,
                clock: clock,
                accounts: AuthDirectory(), notifier: OwnerPurchaseMail(auth: auth)),
            stickerContent: stickerContent,
            media: media,
            billing: billing,
            webhooks: WebhookService(database: database, box: box, audit: AuditLog.shared, clock: clock, settings: config.webhooks),
            secretBox: box,
            appleSignIn: config.appleSignInClientIDs.isEmpty
                ? nil
                : AppleIdentityVerifier(
                    clientIDs: config.appleSignInClientIDs,
                    keySet: AppleKeySet(url: config.appleSignInJWKSURL, client: HTTPClient.shared, now: { clock.now() }),
                    now: { clock.now() }),
            passkeys: config.relyingParty.map { PasskeyService(auth: auth, relyingParty: $0) },
            appStore: appStore.client, offers: appStore.offers,
            bodies: BodyBudget(config), connections: ClientConnections(perClientMax: config.httpConnectionsPerClient, proxies: config.trustedProxies))
    }

    /// libvips, the file blob store under `DATA_DIR/media` and the URL signer (its key derived from the server secret).
    static func mediaServices(_ config: AppConfig, secret: [UInt8], clock: any TimeSource) throws -> MediaServices {
        do {
            return MediaServices(
                images: ImageWorker(),
                blobs: try FileBlobStore(directory: URL(fileURLWithPath: config.dataDirectory).appendingPathComponent("media", isDirectory: true)),
                signer: URLSigner(secret: Data(secret), baseURL: config.mediaBaseURL), clock: clock)
        } catch {
            throw StartupError(message: "media: \(error)")
        }
    }

    static func billingService(
        _ config: AppConfig, database: any Database, machine: SubscriptionMachine, apple: AppleSignedDataVerifier?, clock: any TimeSource
    ) -> BillingService {
        var billing = BillingService(
            database: database, machine: machine, apple: apple,
            stripe: config.stripeWebhookSecrets.isEmpty ? nil : StripeSignatureVerifier(secrets: config.stripeWebhookSecrets),
            accounts: AuthDirectory(), clock: clock)
        if let consumption = config.appleAPI?.consumption { billing.consumptionPolicy = consumption }
        return billing
    }

    /// The App Store Server API client and the offer signer, their keys read now (a bad file stops start-up).
    static func appStoreServer(_ config: AppConfig, clock: any TimeSource) async throws -> (client: AppStoreServerClient?, offers: AppleOfferSigner?)
    {
        guard let settings = config.appleAPI, let apple = config.apple else { return (nil, nil) }
        func read(_ path: String, _ name: String) throws -> String {
            do { return try String(contentsOfFile: path, encoding: .utf8) } catch { throw StartupError(message: "\(name): \(path) cannot be read") }
        }
        let base = settings.baseURL ?? (apple.environment == .production ? AppStoreServerSettings.productionURL : AppStoreServerSettings.sandboxURL)
        do {
            var clientSettings = AppStoreServerSettings(
                keyID: settings.keyID, issuerID: settings.issuerID, bundleID: apple.bundleID,
                privateKeyPEM: try read(settings.privateKeyPath, "APPLE_API_PRIVATE_KEY_FILE"), baseURL: base)
            clientSettings.timeoutSeconds = settings.timeoutSeconds
            let client = try await AppStoreServerClient(settings: clientSettings, http: HTTPClient.shared, now: { clock.now() })
            let offers = try AppleOfferSigner(
                keyID: settings.offerKeyID, bundleID: apple.bundleID, privateKeyPEM: try read(settings.offerKeyPath, "APPLE_OFFER_PRIVATE_KEY_FILE"))
            return (client, offers)
        } catch let error as AppStoreServerError {
            throw StartupError(message: error.detail)
        } catch let error as BillingError {
            throw StartupError(message: "\(error)")
        }
    }

    /// The Apple verifier when Apple billing is configured (its roots read now: a bad file stops start-up).
    static func appleVerifier(_ config: AppConfig, clock: any TimeSource) throws -> AppleSignedDataVerifier? {
        guard let settings = config.apple else { return nil }
        let roots: [Certificate]
        do { roots = try AppleConfig.loadCertificates(paths: settings.rootCertificatePaths) } catch {
            throw StartupError(message: "APPLE_ROOT_CERTIFICATES: \((error as? AppleVerificationError)?.detail ?? "not a PEM or DER certificate")")
        }
        return AppleSignedDataVerifier(
            config: AppleConfig(
                rootCertificates: roots, bundleID: settings.bundleID, appAppleID: settings.appAppleID, environment: settings.environment,
                acceptSandbox: settings.acceptSandbox), clock: clock)
    }

    /// The configured engine (the PostgreSQL pool runs as a service of the application).
    static func open(_ config: AppConfig, logger: Logger) async throws -> (any Database, PostgresHosts?) {
        try await config.database.open(
            leaseTimeoutSeconds: config.databaseLeaseTimeoutSeconds, pool: config.databasePool, sqliteMapMiB: config.sqliteMapMiB, logger: logger)
    }

    /// `SERVER_SECRET`, else `DATA_DIR/server-secret`, created once (32 random bytes, hex, mode 0600).
    static func serverSecret(_ config: AppConfig) throws -> [UInt8] {
        if let secret = config.serverSecret { return Array(secret.utf8) }
        let path = URL(fileURLWithPath: config.dataDirectory).appendingPathComponent("server-secret").path
        if let data = FileManager.default.contents(atPath: path), data.count >= 32 { return Array(data) }
        try FileManager.default.createDirectory(atPath: config.dataDirectory, withIntermediateDirectories: true)
        let secret = Data(SecretHasher.base64url(SecureRandom.bytes(32)).utf8)
        guard FileManager.default.createFile(atPath: path, contents: secret, attributes: [.posixPermissions: 0o600]) else {
            throw StartupError(message: "cannot write \(path)")
        }
        return Array(secret)
    }
}

public struct StartupError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}

extension BodyBudget {
    /// `HTTP_BODY_BUFFER_MIB`, `HTTP_BODY_READS_PER_CLIENT`, `HTTP_BODY_TIMEOUT_SECONDS`.
    convenience init(_ config: AppConfig) {
        self.init(
            bytesMax: config.httpBodyBufferMiB << 20, readsPerClientMax: config.httpBodyReadsPerClient, timeoutSeconds: config.httpBodyTimeoutSeconds)
    }
}
