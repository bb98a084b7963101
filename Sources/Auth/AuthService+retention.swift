import Clock
import Foundation
import Logging
import Storage

/// What one retention pass forgot, per table (docs/operations.md "Retention").
public struct AuthPurge: Sendable, Equatable {
    public var attemptBudgets = 0
    public var signUpRequests = 0
    public var codes = 0
    public var sessions = 0
    public var mfaChallenges = 0
    public var emailChanges = 0
    public var auditRows = 0
    public var usedChallenges = 0

    public var total: Int { attemptBudgets + signUpRequests + codes + sessions + mfaChallenges + emailChanges + auditRows + usedChallenges }
}

extension AuthService {
    /// Forgets what Auth keeps only for a while, at most `limit` rows of each table, each table in its own short
    /// transaction (the sweeper calls it every pass): idle attempt budgets (2 hours), sign-up requests past their
    /// lifetime, codes an hour after they expired, sessions ``AuthPolicy/sessionRetentionSeconds`` after they
    /// expired, second-factor challenges and email changes a day after, audit rows older than
    /// ``AuthPolicy/auditRetentionSeconds``, and used passkey challenges once expired (they cannot be used again then). Every delete finds its rows by an index (migration 0018).
    public func purgeExpired(limit: Int, logger: Logger) async throws -> AuthPurge {
        let now = clock.now()
        var purged = AuthPurge()
        purged.attemptBudgets = try await database.transaction(logger: logger) {
            try await AttemptBudget.purge($0, idleBefore: now.addingTimeInterval(-2 * 3600), now: now, limit: limit)
        }
        purged.signUpRequests = try await purge(
            "sign_up_requests", key: "id", column: "created_at_ms", before: now.addingTimeInterval(-policy.pendingSignUpSeconds), limit: limit,
            logger: logger)
        purged.codes = try await purge(
            "otp_codes", key: "email, purpose", column: "expires_at_ms", before: now.addingTimeInterval(-3600), limit: limit, logger: logger)
        purged.sessions = try await purge(
            "sessions", key: "id", column: "expires_at_ms", before: now.addingTimeInterval(-policy.sessionRetentionSeconds), limit: limit,
            logger: logger)
        purged.mfaChallenges = try await purge(
            "mfa_challenges", key: "token_hash", column: "expires_at_ms", before: now.addingTimeInterval(-86400), limit: limit, logger: logger)
        purged.emailChanges = try await purge(
            "email_changes", key: "user_id", column: "expires_at_ms", before: now.addingTimeInterval(-86400), limit: limit, logger: logger)
        purged.auditRows = try await purge(
            "audit_log", key: "id", column: "at_ms", before: now.addingTimeInterval(-policy.auditRetentionSeconds), limit: limit, logger: logger)
        purged.usedChallenges = try await purge(
            "webauthn_used_challenges", key: "challenge_hash", column: "expires_at_ms", before: now, limit: limit, logger: logger)
        return purged
    }

    /// Deletes at most `limit` rows of one of Auth's tables whose `column` is before `cutoff`, oldest first; how many.
    /// The deleting statement checks the cutoff again on the row it deletes: a row rewritten in place meanwhile (a new
    /// code or email change for the same key) is young again, and PostgreSQL re-reads only the deleted row then, not the
    /// subquery that found it. On PostgreSQL the rows are named by their `ctid`s, read once: offered the column's index
    /// for that check, the generic plan walked every old row instead (391–798 buffers a call in `QueryPlanTests`).
    func purge(_ table: String, key: String, column: String, before cutoff: Date, limit: Int, logger: Logger) async throws -> Int {
        try await database.transaction(logger: logger) { tx in
            let oldest = "SELECT \(tx.engine == .postgres ? "ctid" : key) FROM \(table) WHERE \(column) < ? ORDER BY \(column) LIMIT ?"
            let found = tx.engine == .postgres ? "ctid = ANY(ARRAY(\(oldest)))" : "(\(key)) IN (\(oldest))"
            return try await tx.query("DELETE FROM \(table) WHERE \(found) AND \(column) < ? RETURNING 1", [cutoff, limit, cutoff]).count
        }
    }
}
