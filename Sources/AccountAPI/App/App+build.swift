import Auth
import Entitlements
import Hummingbird
import Logging
import Mail
import ServiceLifecycle
import Storage
import Traces
import UnixSignals

/// The one entry point that `serve` and the tests share: the application with its services, migrated before it serves.
public func buildApplication(_ dependencies: Dependencies, logger: Logger) -> some ApplicationProtocol {
    let router = buildRouter(dependencies)
    var app = Application(
        responder: HeadResponder(wrapped: router.buildResponder()),
        server: .http1(
            configuration: .init(
                additionalChannelHandlers: [QuiesceGrace(), dependencies.connections.guardHandler()],
                idleTimeout: .seconds(Int64(dependencies.config.httpIdleTimeoutSeconds)),
                httpDecoderConfiguration: .init(
                    maxHeaderFieldSize: ClientConnections.headerBytesMax, maxHeaderListSize: ClientConnections.headerBytesMax,
                    maxHeaderFieldCount: 100))),
        configuration: .init(address: .hostname(dependencies.config.host, port: dependencies.config.port), serverName: "account-service"),
        onServerRunning: { [drain = dependencies.drain] in drain.serving(on: $0) },
        logger: logger
    )
    if let hosts = dependencies.postgresHosts { app.addServices(PostgresPoolService(hosts: hosts)) }
    app.addServices(dependencies.hasher, DatabaseLifecycle(database: dependencies.database))
    app.addServices(BackgroundSweeper(dependencies: dependencies, intervalSeconds: dependencies.config.sweepIntervalSeconds, logger: logger))
    app.addServices(WebhookDeliveryService(dependencies: dependencies, logger: logger))
    app.addServices(MemoryReturn(budget: dependencies.bodies, connections: dependencies.connections, logger: logger))
    if let client = dependencies.appStore, let settings = dependencies.config.appleAPI {
        app.addServices(AppleServerJobs(dependencies: dependencies, client: client, settings: settings, logger: logger))
    }
    if let schedule = dependencies.config.backups {
        app.addServices(BackupService(config: dependencies.config, schedule: schedule, clock: dependencies.clock, logger: logger))
    }
    // Last, so it is told to stop first after the server: mail queued by the last requests still goes out.
    app.addServices(MailQueueService(queue: dependencies.mailQueue))
    let database = dependencies.database
    app.beforeServerStarts {
        let applied = try await database.migrate(database.engine.migrations, logger: logger)
        logger.info("database ready", metadata: ["engine": "\(database.engine)", "migrationsApplied": "\(applied.count)"])
    }
    return app
}

/// `serve`: runs the application until SIGTERM or SIGINT, then drains. `/ready` answers 503 and answers carry
/// `Connection: close`; the listener stops accepting and closes 0.2 s later (a load balancer's next connection goes to
/// another node; ``DrainState/stopAccepting()``), requests in flight finish, then the services stop in reverse order:
/// mail goes out, the webhook worker records its tries, the sweeper hands its lease back, the database closes.
/// Whatever is still running after `SHUTDOWN_GRACE_SECONDS` is cancelled.
public func serve(_ dependencies: Dependencies, logger: Logger) async throws {
    // Traces (OTEL_EXPORTER_OTLP_ENDPOINT), before the router is built; the exporter stops last, so the drain's own
    // spans are sent.
    let tracing = try TraceExport.bootstrap(dependencies.config, logger: logger)
    let app = buildApplication(dependencies, logger: logger)
    // The drain flag is set first (services stop last to first), then the application drains. After the grace, work
    // is cancelled; what cannot be (a SQLite statement waiting for another process's lock) ends within its busy timeout.
    var configuration = ServiceGroupConfiguration(
        services: tracing + [app, DrainService(state: dependencies.drain)], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
    configuration.maximumGracefulShutdownDuration = .seconds(dependencies.config.shutdownGraceSeconds)
    try await ServiceGroup(configuration: configuration).run()
}

/// Every controller's routes, behind the middleware: access log and response headers, request metrics, problems (with
/// 405 for known paths), the client's address.
func buildRouter(_ d: Dependencies) -> Router<AppRequestContext> {
    AppMetrics.bootstrap
    let router = Router(context: AppRequestContext.self)
    // One span per request, named by its route, continuing the caller's `traceparent` (only when tracing is on).
    // Query values that are capabilities or personal data (signed media URLs, searches, cursors) are never recorded.
    if Traces.enabled {
        router.add(
            middleware: TracingMiddleware(
                redactingQueryParameters: ["sig", "exp", "email", "query", "q", "cursor", "before", "after", "user", "actor", "token", "code"]))
    }
    router.add(middleware: DrainMiddleware(state: d.drain))
    router.add(middleware: AccessLogMiddleware())
    // Requests by route (the pattern, never the raw path) and status, with latency histograms; Hummingbird's series,
    // recorded without turning each response into a streamed one (see RequestMetricsMiddleware).
    router.add(middleware: RequestMetricsMiddleware())
    let allowedMethods = AllowedMethods()
    router.add(middleware: ProblemMiddleware(allowedMethods: allowedMethods))
    router.add(middleware: SingleHeadersMiddleware())
    router.add(middleware: ClientAddressMiddleware(proxies: d.config.trustedProxies))
    let authenticator = Authenticator(auth: d.auth, apiKeys: d.apiKeys, profiles: d.profiles, requireAdminMFA: d.config.requireAdminMFA)
    router.add(middleware: BodyBudgetMiddleware(budget: d.bodies, recheck: { try await authenticator.recheck($0, $1) }))
    SystemController(database: d.database, catalog: d.catalog, drain: d.drain).addRoutes(to: router)
    MetricsController(ledger: d.ledger, token: d.config.metricsToken).addRoutes(to: router)
    AuthController(auth: d.auth, authenticator: authenticator).addRoutes(to: router)
    AccountController(auth: d.auth, authenticator: authenticator).addRoutes(to: router)
    ProfileController(profiles: d.profiles, entitlements: d.entitlements, authenticator: authenticator).addRoutes(to: router)
    PurchaseRequestController(stickers: d.stickers, profiles: d.profiles, authenticator: authenticator).addRoutes(to: router)
    TokenController(entitlements: d.entitlements, ledger: d.ledger, auth: d.auth, authenticator: authenticator).addRoutes(to: router)
    LedgerController(ledger: d.ledger, authenticator: authenticator).addRoutes(to: router)
    let reads = SessionReads(entitlements: d.entitlements, content: d.stickerContent, sessions: AuthSessionRows(auth: d.auth))
    EntitlementController(entitlements: d.entitlements, auth: d.auth, reads: reads, authenticator: authenticator).addRoutes(to: router)
    StickerController(stickers: d.stickers, content: d.stickerContent, media: d.media, authenticator: authenticator).addRoutes(to: router)
    StickerContentController(content: d.stickerContent, reads: reads, media: d.media, authenticator: authenticator).addRoutes(to: router)
    AdminStickerController(content: d.stickerContent, stickers: d.stickers, media: d.media, authenticator: authenticator).addRoutes(to: router)
    BillingController(billing: d.billing, entitlements: d.entitlements, authenticator: authenticator).addRoutes(to: router)
    AdminUserController(auth: d.auth, profiles: d.profiles, authenticator: authenticator).addRoutes(to: router)
    AdminAccountController(subscriptions: d.subscriptions, entitlements: d.entitlements, ledger: d.ledger, authenticator: authenticator)
        .addRoutes(to: router)
    AdminCatalogController(stickers: d.stickers, billing: d.billing, authenticator: authenticator).addRoutes(to: router)
    AdminLedgerController(
        auth: d.auth, profiles: d.profiles, entitlements: d.entitlements, stickers: d.stickers, ledger: d.ledger, authenticator: authenticator
    ).addRoutes(to: router)
    AdminOperatorController(auth: d.auth, apiKeys: d.apiKeys, authenticator: authenticator).addRoutes(to: router)
    AdminWebhookController(webhooks: d.webhooks, authenticator: authenticator).addRoutes(to: router)
    AppleSignInController(auth: d.auth, verifier: d.appleSignIn, authenticator: authenticator).addRoutes(to: router)
    PasskeyController(passkeys: d.passkeys, authenticator: authenticator).addRoutes(to: router)
    AppleServerController(auth: d.auth, billing: d.billing, appStore: d.appStore, offers: d.offers, authenticator: authenticator).addRoutes(
        to: router)
    MFAController(auth: d.auth, authenticator: authenticator, issuer: d.config.totpIssuer).addRoutes(to: router)
    if d.config.consoleEnabled { addConsole(to: router, d, problems: ProblemMiddleware(allowedMethods: allowedMethods)) }
    allowedMethods.record(router)
    return router
}

/// The operator console at `/console` (`CONSOLE_ENABLED=true`): its own middleware renders errors as pages and sets the
/// console's security headers on every answer.
func addConsole(to router: Router<AppRequestContext>, _ d: Dependencies, problems: ProblemMiddleware<AppRequestContext>) {
    let pages = ConsolePages()
    let gate = ConsoleGate(auth: d.auth, requireAdminMFA: d.config.requireAdminMFA, clock: d.clock)
    let group = router.group("/console").add(middleware: ConsoleMiddleware(pages: pages, problems: problems))
    ConsoleController(
        gate: gate, pages: pages, auth: d.auth, apiKeys: d.apiKeys, ledger: d.ledger
    ).addRoutes(to: group)
    ConsoleCatalogController(
        gate: gate, pages: pages, auth: d.auth, stickers: d.stickers, catalog: d.catalog,
        uploads: PackUploads(content: d.stickerContent, media: d.media)
    ).addRoutes(to: group)
    ConsoleUserController(
        gate: gate, pages: pages, auth: d.auth, profiles: d.profiles, ledger: d.ledger, entitlements: d.entitlements,
        subscriptions: d.subscriptions, stickers: d.stickers, catalog: d.catalog, billing: d.billing,
        content: d.stickerContent
    ).addRoutes(to: group)
    ConsoleWebhookController(gate: gate, pages: pages, webhooks: d.webhooks, auth: d.auth).addRoutes(to: group)
}

/// The PostgreSQL hosts' pools, for the application's lifetime.
struct PostgresPoolService: NamedService {
    let hosts: PostgresHosts
    func run() async throws { await cancelWhenGracefulShutdown { await hosts.run() } }
}

/// Closes the database after graceful shutdown, once the server (shut down first) has finished its requests.
struct DatabaseLifecycle: NamedService {
    let database: any Database
    func run() async throws {
        try? await gracefulShutdown()
        try await database.close()
    }
}
