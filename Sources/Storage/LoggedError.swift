import Logging
import PostgresNIO

/// How an error is written to a log or a message. postgres-nio's errors describe themselves only as "Generic
/// description to prevent accidental leakage of sensitive data", which left an operator nothing to go on when a job or
/// a migration failed; their reflection carries the server's `detail` (which quotes row values) and a decoding error's
/// cell. Here a server error gives its SQLSTATE, message and the schema objects it names; a decoding error its column
/// and type; anything else describes itself. Bind values are never part of it (postgres-nio prints them as `****`).
public func loggedDescription(of error: any Error) -> String {
    switch error {
    case let error as PSQLError:
        guard let info = error.serverInfo else { return "PostgreSQL \(error.code)" }
        var text = "PostgreSQL \(info[.severity] ?? "ERROR") \(info[.sqlState] ?? "?"): \(info[.message] ?? "(no message)")"
        let named: [(String, PSQLError.ServerInfo.Field)] = [
            ("table", .tableName), ("column", .columnName), ("constraint", .constraintName), ("context", .locationContext),
        ]
        for (label, field) in named { if let value = info[field] { text += "; \(label): \(value)" } }
        return text
    case let error as PostgresDecodingError:
        return "PostgreSQL decoding \(error.code): column \(error.columnName) as \(error.targetType)"
    default:
        return String(describing: error)
    }
}

extension Logger.MetadataValue {
    /// An error for a log line's metadata (``loggedDescription(of:)``).
    public static func error(_ error: any Error) -> Logger.MetadataValue { .string(loggedDescription(of: error)) }
}
