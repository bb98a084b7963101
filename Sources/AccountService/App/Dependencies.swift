import Auth
import Entitlements
import Foundation
import Logging
import PostgresNIO
import Storage

/// Everything the routes need, built once from the configuration (or by tests).
struct Dependencies: Sendable {
    let config: AppConfig
    let database: any Database
    let catalog: PlanCatalog
    let mailer: any Mailer
    let clock: any TimeSource
    /// The PostgreSQL pool, when that is the engine: the application runs it as a service.
    let postgresClient: PostgresClient?

    /// Opens the configured engine and loads the plan catalog. Nothing is migrated yet.
    static func make(config: AppConfig, clock: any TimeSource = SystemTimeSource(), mailer: (any Mailer)? = nil, logger: Logger) async throws
        -> Dependencies
    {
        let catalog: PlanCatalog
        do { catalog = try PlanCatalog.load(path: config.plansFile) } catch { throw StartupError(message: error.description) }
        let database: any Database
        var postgresClient: PostgresClient?
        switch config.database {
        case .sqlite(let path):
            database = try await SQLiteDatabase.open(path: path, logger: logger)
        case .postgres(let url):
            let client = PostgresClient(configuration: try PostgresDatabase.configuration(url: url), backgroundLogger: logger)
            postgresClient = client
            database = PostgresDatabase(client: client)
        }
        return Dependencies(
            config: config, database: database, catalog: catalog, mailer: mailer ?? config.mailTransport.makeMailer(from: config.mailFrom),
            clock: clock, postgresClient: postgresClient)
    }
}

struct StartupError: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}
