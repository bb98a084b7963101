import Foundation
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
            [UUID().uuidString.lowercased(), at, actor, action, subject, ip, detail])
    }

    public func record(_ tx: any SQLExecutor, at: Date, actor: String, action: String, subject: String?, ip: String?, detail: String?) async throws {
        try await Self.record(tx, at: at, actor: actor, action: action, subject: subject, ip: ip, detail: detail)
    }
}
