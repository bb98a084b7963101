import Auth
import Entitlements
import Hummingbird
import Logging
import ServiceLifecycle
import Storage

/// The one entry point that `serve` and the tests share: wires stores, services and routes.
public func buildApplication(_ dependencies: Dependencies, logger: Logger) -> some ApplicationProtocol {
    let router = buildRouter(dependencies)
    var app = Application(
        router: router,
        configuration: .init(address: .hostname(dependencies.config.host, port: dependencies.config.port), serverName: "account-service"),
        logger: logger
    )
    if let client = dependencies.postgresClient { app.addServices(client) }
    app.addServices(dependencies.hasher, DatabaseLifecycle(database: dependencies.database))
    app.addServices(
        LedgerSweeper(
            database: dependencies.database, ledger: dependencies.ledger, subscriptions: dependencies.subscriptions, idempotency: dependencies.idempotency,
            auth: dependencies.auth, clock: dependencies.clock, intervalSeconds: dependencies.config.sweepIntervalSeconds, logger: logger))
    let database = dependencies.database
    app.beforeServerStarts {
        let applied = try await database.migrate(database.engine.migrations, logger: logger)
        logger.info("database ready", metadata: ["engine": "\(database.engine)", "migrationsApplied": "\(applied.count)"])
    }
    return app
}

/// All routes, with the problem and access-log middleware around them.
func buildRouter(_ dependencies: Dependencies) -> Router<AppRequestContext> {
    AppMetrics.bootstrap
    let router = Router(context: AppRequestContext.self)
    router.add(middleware: AccessLogMiddleware())
    // Requests by route (the pattern, never the raw path) and status, with latency histograms; Hummingbird's series,
    // recorded without turning each response into a streamed one (see RequestMetricsMiddleware).
    router.add(middleware: RequestMetricsMiddleware())
    let allowedMethods = AllowedMethods()
    router.add(middleware: ProblemMiddleware(allowedMethods: allowedMethods))
    router.add(middleware: ClientAddressMiddleware(proxies: dependencies.config.trustedProxies))
    MetricsRoutes(database: dependencies.database, token: dependencies.config.metricsToken).register(on: router)
    SystemRoutes(database: dependencies.database, catalog: dependencies.catalog).register(on: router)
    let authenticator = Authenticator(auth: dependencies.auth, apiKeys: dependencies.apiKeys)
    AuthRoutes(auth: dependencies.auth, authenticator: authenticator).register(on: router)
    ProfileRoutes(profiles: dependencies.profiles, authenticator: authenticator).register(on: router)
    let subscriptionRoutes = SubscriptionRoutes(
        database: dependencies.database, subscriptions: dependencies.subscriptions, clock: dependencies.clock, authenticator: authenticator)
    subscriptionRoutes.register(on: router)
    let writer = IdempotentWrite(database: dependencies.database, store: dependencies.idempotency)
    let ledgerRoutes = LedgerRoutes(
        ledger: dependencies.ledger, writer: writer, authenticator: authenticator, oneStatementSpends: dependencies.config.oneStatementSpends)
    ledgerRoutes.register(on: router)
    let tokenRoutes = TokenRoutes(
        database: dependencies.database, ledger: dependencies.ledger, subscriptions: dependencies.subscriptions, clock: dependencies.clock,
        authenticator: authenticator)
    tokenRoutes.register(on: router)
    let packs = StickerPackStore(catalog: dependencies.catalog, clock: dependencies.clock)
    let entitlements = EntitlementService(subscriptions: dependencies.subscriptions, packs: packs, ledger: dependencies.ledger, clock: dependencies.clock)
    EntitlementRoutes(
        database: dependencies.database, entitlements: entitlements, ledger: dependencies.ledger, auth: dependencies.auth, writer: writer,
        authenticator: authenticator, clock: dependencies.clock
    ).register(on: router)
    BillingRoutes(
        database: dependencies.database, billing: dependencies.billing, authenticator: authenticator, subscriptionRoutes: subscriptionRoutes,
        tokenRoutes: tokenRoutes
    ).register(on: router)
    AdminPackRoutes(database: dependencies.database, packs: packs, clock: dependencies.clock, authenticator: authenticator).register(on: router)
    AdminRoutes(
        auth: dependencies.auth, profiles: dependencies.profiles, subscriptionRoutes: subscriptionRoutes, authenticator: authenticator,
        ledger: dependencies.ledger, ledgerRoutes: ledgerRoutes, tokenRoutes: tokenRoutes
    ).register(on: router)
    allowedMethods.record(router)
    return router
}

/// Closes the database after graceful shutdown, once the server (shut down first) has finished its requests.
struct DatabaseLifecycle: Service {
    let database: any Database
    func run() async throws {
        try? await gracefulShutdown()
        try await database.close()
    }
}
