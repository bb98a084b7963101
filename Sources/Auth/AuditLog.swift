import Clock
import Events
import Foundation
import Logging
import Storage

/// Security-relevant and operator actions: who, what, when, from where (`audit_log`, owned here). Other modules record
/// through ``AuditTrail`` (this type's ``shared`` instance), in their own transaction.
public struct AuditLog: AuditTrail {
    public static let shared = AuditLog()

    public init() {}

    public static func record(
        _ executor: any SQLExecutor, at: Date, actor: String, action: String, subject: String?, ip: String?, detail: String? = nil
    ) async throws {
        try await executor.query(
            "INSERT INTO audit_log (id, at_ms, actor, action, subject, ip, detail) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [FreshID.uuid(), at, actor, action, subject, ip, detail])
    }

    public func record(_ tx: any SQLExecutor, at: Date, actor: String, action: String, subject: String?, ip: String?, detail: String?) async throws {
        try await Self.record(tx, at: at, actor: actor, action: action, subject: subject, ip: ip, detail: detail)
    }
}

/// One audit row, as operators read it.
public struct AuditEntry: Sendable, Equatable {
    public let id: String
    public let at: Date
    public let actor: String
    public let action: String
    public let subject: String?
    public let ip: String?
    public let detail: String?
}

/// Filters for reading the audit trail (all optional; together they narrow).
public struct AuditQuery: Sendable {
    public var userID: String?
    public var actor: String?
    public var action: String?
    public var since: Date?
    public var cursor: String?
    public var limit: Int = 50

    public init() {}
}

extension AuditLog {
    public static let pageMax = 200

    /// Newest first. `userID` matches rows about the user (subject) or by the user (actor, as themselves or as an
    /// operator); the next page starts after `nextCursor`.
    public static func read(_ tx: any SQLExecutor, _ query: AuditQuery) async throws -> (entries: [AuditEntry], nextCursor: String?) {
        var conditions: [String] = []
        var binds: [any SQLBindable] = []
        if let user = query.userID {
            conditions.append("(subject = ? OR actor = ? OR actor = ?)")
            binds += [user, user, "user:" + user]
        }
        if let actor = query.actor {
            conditions.append("actor = ?")
            binds.append(actor)
        }
        if let action = query.action {
            conditions.append("action = ?")
            binds.append(action)
        }
        if let since = query.since {
            conditions.append("at_ms >= ?")
            binds.append(since)
        }
        if let cursor = query.cursor {
            let parts = cursor.split(separator: "_", maxSplits: 1)
            guard parts.count == 2, let at = Int64(parts[0]), parts[1].utf8.count <= 64 else {
                throw AuthError.validation("Query 'cursor' must be a nextCursor from a previous page.")
            }
            // A row comparison, which an index on (at_ms, id) serves as a range (an OR of the two cases made page 1,000
            // read the 99,900 rows before it); `at_ms <= ?` lets the indexes that lead with actor or subject bound it too.
            conditions.append("at_ms <= ? AND (at_ms, id) < (?, ?)")
            binds += [at, at, String(parts[1])]
        }
        let pageSize = min(max(query.limit, 1), pageMax)
        let filter = conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")
        let rows = try await tx.query("SELECT * FROM audit_log\(filter) ORDER BY at_ms DESC, id DESC LIMIT ?", binds + [pageSize + 1])
        let entries = try rows.prefix(pageSize).map { row in
            AuditEntry(
                id: try row.string("id"), at: try row.date("at_ms"), actor: try row.string("actor"), action: try row.string("action"),
                subject: row.optionalString("subject"), ip: row.optionalString("ip"), detail: row.optionalString("detail"))
        }
        return (entries, rows.count > pageSize ? entries.last.map { "\($0.at.epochMilliseconds)_\($0.id)" } : nil)
    }
}

extension AuthService {
    /// The audit trail for operators (``AuditLog/read(_:_:)``).
    public func auditTrail(_ query: AuditQuery, logger: Logger) async throws -> (entries: [AuditEntry], nextCursor: String?) {
        try await database.withConnection(logger: logger) { try await AuditLog.read($0, query) }
    }
}
