import Logging
import PostgresNIO

/// What `DATABASE_URL` names.
public enum DatabaseLocation: Sendable, Equatable {
    case sqlite(path: String)
    case postgres(url: String)

    /// Parses `sqlite:PATH`, `sqlite::memory:` or `postgres://…`; nil or empty means the default SQLite file.
    public static func parse(_ url: String?) throws -> DatabaseLocation {
        guard let url, !url.isEmpty else { return .sqlite(path: "data/account-service.sqlite") }
        if url.hasPrefix("sqlite:") {
            let path = String(url.dropFirst("sqlite:".count))
            guard !path.isEmpty else { throw StorageError.invalidURL("sqlite: needs a path, e.g. sqlite:data/account-service.sqlite") }
            return .sqlite(path: path)
        }
        if url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") {
            _ = try PostgresDatabase.hostConfigurations(url: url)
            return .postgres(url: url)
        }
        throw StorageError.invalidURL("must start with sqlite: or postgres://")
    }

    public var engine: Engine {
        switch self {
        case .sqlite: .sqlite
        case .postgres: .postgres
        }
    }

    /// Opens the engine. On PostgreSQL the hosts' pools come back too: the application runs them as a service.
    public func open(
        leaseTimeoutSeconds: Double, pool: PostgresPoolSettings = PostgresPoolSettings(), sqliteMapMiB: Int = SQLiteDatabase.defaultMapMiB,
        logger: Logger
    ) async throws -> (any Database, PostgresHosts?) {
        switch self {
        case .sqlite(let path):
            return (try await SQLiteDatabase.open(path: path, mapMiB: sqliteMapMiB, lockTimeoutSeconds: pool.lockTimeoutSeconds, logger: logger), nil)
        case .postgres(let url):
            let hosts = PostgresHosts(
                hosts: try PostgresDatabase.hostConfigurations(url: url).map {
                    var connection = $0.connection
                    if pool.lockTimeoutSeconds > 0 {
                        connection.options.additionalStartupParameters.append(("lock_timeout", "\(pool.lockTimeoutSeconds)s"))
                    }
                    return .init(name: $0.name, pool: PostgresPool(configuration: connection, settings: pool, logger: logger))
                }, logger: logger)
            return (PostgresDatabase(hosts: hosts, leaseTimeoutSeconds: leaseTimeoutSeconds), hosts)
        }
    }
}

extension Database {
    /// The engine's name when the database answers a ping within `timeoutSeconds`; throws otherwise (readiness checks).
    public func readiness(timeoutSeconds: Double, logger: Logger) async throws -> String {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await ping(timeoutSeconds: timeoutSeconds, logger: logger) }
            group.addTask {
                try await Task.sleep(for: .seconds(timeoutSeconds))
                throw StorageError.unavailable("ping timed out")
            }
            try await group.next()
            group.cancelAll()
        }
        return engine.rawValue
    }

    /// Reads that share statements (``PostgresBatchedStatement``): on PostgreSQL concurrent lookups of one statement run
    /// together, up to `maxBatch` keys in one, on dedicated connections. nil on SQLite, whose reads cost microseconds each:
    /// the caller reads one by one there.
    public func sharedReads<Key: Hashable & Sendable, Value: Sendable>(
        sql: String, maxBatch: Int, logger: Logger, prepare: @escaping PostgresBatchedStatement<Key, Value>.Prepare
    ) -> PostgresBatchedStatement<Key, Value>? {
        (self as? PostgresDatabase)?.batchedStatement(sql: sql, maxBatch: maxBatch, logger: logger, prepare: prepare)
    }
}

extension Engine {
    /// The migrations compiled into the binary for this engine.
    public var migrations: [Migration] {
        switch self {
        case .sqlite: EmbeddedMigrations.sqlite
        case .postgres: EmbeddedMigrations.postgres
        }
    }
}
