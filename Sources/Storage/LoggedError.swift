import Logging
import PostgresNIO

/// How an error is written to a log or a message. postgres-nio's errors describe themselves only as "Generic
/// description to prevent accidental leakage of sensitive data", which left an operator nothing to go on when a job or
/// a migration failed; their reflection carries the server's `detail` (which quotes row values) and a decoding error's
/// cell. Here a server error gives its SQLSTATE, message and the schema objects it names; a connection failure its
/// kind and cause (refused, TLS, DNS); a decoding error its column and type; Foundation's coding errors their case and
/// path (their own text quotes the value); anything else describes itself. Bind values are never part of it.
///
/// PostgreSQL's `message` itself quotes a value in one case: text that fails a cast (22P02, `invalid input syntax for
/// type bigint: "…"`). No statement casts a text bind today (every `CAST(? AS …)` binds an integer, a boolean or
/// encoded JSON); keep it so.
public func loggedDescription(of error: any Error) -> String {
    switch error {
    case let error as PSQLError:
        guard let info = error.serverInfo else {
            return "PostgreSQL \(error.code)" + (error.underlying.map { ": " + loggedDescription(of: $0) } ?? "")
        }
        return serverError(
            info[.severity], info[.sqlState], info[.message],
            [("table", info[.tableName]), ("column", info[.columnName]), ("constraint", info[.constraintName]), ("context", info[.locationContext])])
    case PostgresError.server(let message):  // postgres-nio's older API (prepared statements)
        let fields = message.fields
        return serverError(
            fields[.severity], fields[.sqlState], fields[.message],
            [
                ("table", fields[.tableName]), ("column", fields[.columnName]), ("constraint", fields[.constraintName]),
                ("context", fields[.locationContext]),
            ])
    case let error as PostgresDecodingError:
        return "PostgreSQL decoding \(error.code): column \(error.columnName) (\(error.postgresType)) as \(error.targetType)"
    case let error as DecodingError:
        return coding("decoding", error.context)
    case let error as EncodingError:
        return coding("encoding", error.context)
    default:
        return String(describing: error)
    }
}

private func serverError(_ severity: String?, _ state: String?, _ message: String?, _ named: [(String, String?)]) -> String {
    var text = "PostgreSQL \(severity ?? "ERROR") \(state ?? "?"): \(message ?? "(no message)")"
    for case let (label, value?) in named { text += "; \(label): \(value)" }
    return text
}

private func coding(_ what: String, _ context: (codingPath: [any CodingKey], kind: String)?) -> String {
    guard let context else { return "\(what) failed" }
    let path = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
    return "\(what) failed (\(context.kind)) at \(path.isEmpty ? "the top level" : path)"
}

private extension DecodingError {
    var context: (codingPath: [any CodingKey], kind: String)? {
        switch self {
        case .typeMismatch(_, let c): (c.codingPath, "type mismatch")
        case .valueNotFound(_, let c): (c.codingPath, "value not found")
        case .keyNotFound(let key, let c): (c.codingPath + [key], "key not found")
        case .dataCorrupted(let c): (c.codingPath, "data corrupted")
        @unknown default: nil
        }
    }
}

private extension EncodingError {
    var context: (codingPath: [any CodingKey], kind: String)? {
        guard case .invalidValue(_, let c) = self else { return nil }
        return (c.codingPath, "invalid value")
    }
}

extension Logger.MetadataValue {
    /// An error for a log line's metadata (``loggedDescription(of:)``).
    public static func error(_ error: any Error) -> Logger.MetadataValue { .string(loggedDescription(of: error)) }
}
