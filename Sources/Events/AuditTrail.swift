import Foundation
import Storage

/// Where security-relevant and operator actions are recorded (who, what, when, from where). The audit log's owner (Auth,
/// `AuditLog`) implements it; other modules receive it at wiring and record inside their own transaction, so an action
/// and its audit row commit together.
public protocol AuditTrail: Sendable {
    func record(_ tx: any SQLExecutor, at: Date, actor: String, action: String, subject: String?, ip: String?, detail: String?) async throws
}

/// For module tests that do not look at the audit log: records nothing.
public struct NoAuditTrail: AuditTrail {
    public init() {}
    public func record(_ tx: any SQLExecutor, at: Date, actor: String, action: String, subject: String?, ip: String?, detail: String?) async throws {}
}
