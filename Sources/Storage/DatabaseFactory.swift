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
            _ = try PostgresDatabase.configuration(url: url)
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
