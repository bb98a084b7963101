import Clock
import Foundation
import Logging
import Storage

/// The `sessions` table: every statement that reads or writes it, in one place (Auth's services call these; other
/// modules use the exported lookup statements through Auth's functions). Rows come back typed.
struct SessionStore: Sendable {
    /// The sessions this process is touching now.
    static let touching = TouchesUnderWay(kind: "session")

    /// The session columns a liveness check reads (and the selected profile), for statements that check the session but
    /// do not need its user (the entitlement snapshot, the catalog version).
    static let checkedColumns =
        "s.id AS session_id, s.last_used_at_ms, s.expires_at_ms, s.revoked_at_ms, s.selected_profile_id, u.id, u.deleted_at_ms"

    static let columns = """
        \(checkedColumns), s.created_at_ms, s.authenticated_at_ms, u.email, u.name, u.email_verified, u.role,
        u.prompt_enhancement_enabled
        """

    /// The session and its user for one token hash; `selected_is_default` tells whether the session acts as the owner.
    static let lookup = """
        SELECT \(columns), sp.is_default AS selected_is_default FROM sessions s JOIN users u ON u.id = s.user_id
        LEFT JOIN family_profiles sp ON sp.id = s.selected_profile_id WHERE s.token_hash = ?
        """

    static let checkedLookup = "SELECT \(checkedColumns) FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.token_hash = ?"

    /// ``checkedLookup`` for several tokens at once (PostgreSQL): bind the token hashes joined by commas; each row also
    /// carries its `token_hash`.
    static let checkedLookups = """
        SELECT s.token_hash, \(checkedColumns) FROM unnest(string_to_array(?, ',')) AS h(token_hash)
        JOIN sessions s ON s.token_hash = h.token_hash JOIN users u ON u.id = s.user_id
        """

    /// A session as the account's session list shows it.
    struct Listed: Decodable {
        let id: String
        let createdAt: Date
        let lastUsedAt: Date
        let expiresAt: Date
        let userAgent: String?
        let ip: String?
    }

    func insert(
        _ tx: any SQLExecutor, id: String, userID: String, tokenHash: String, expiresAt: Date, client: ClientInfo, profileID: String?, now: Date
    ) async throws {
        try await tx.query(
            """
            INSERT INTO sessions (id, user_id, token_hash, created_at_ms, last_used_at_ms, expires_at_ms, authenticated_at_ms, user_agent, ip,
                                  selected_profile_id)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, [id, userID, tokenHash, now, now, expiresAt, now, client.userAgent, client.ip, profileID])
    }

    /// Slides the idle expiry of a live session last written at or before `due` (one written since, by a concurrent
    /// request on another node, is left as it is: no second row version).
    func touch(_ tx: any SQLExecutor, sessionID: String, now: Date, due: Date) async throws {
        try await tx.query(
            "UPDATE sessions SET last_used_at_ms = ? WHERE id = ? AND revoked_at_ms IS NULL AND last_used_at_ms <= ?", [now, sessionID, due])
    }

    /// The account's sessions neither revoked, expired nor idle since `idleSince`, most recently used first (at most 200).
    func live(_ tx: any SQLExecutor, userID: String, now: Date, idleSince: Date) async throws -> [Listed] {
        try await tx.query(
            """
            SELECT id, created_at_ms, last_used_at_ms, expires_at_ms, user_agent, ip FROM sessions
            WHERE user_id = ? AND revoked_at_ms IS NULL AND expires_at_ms > ? AND last_used_at_ms > ?
            ORDER BY last_used_at_ms DESC LIMIT 200
            """, [userID, now, idleSince], as: Listed.self)
    }

    /// Revokes one of the account's sessions; false when it has none by this id still live.
    func revoke(_ tx: any SQLExecutor, id: String, userID: String, now: Date) async throws -> Bool {
        try await !tx.query(
            "UPDATE sessions SET revoked_at_ms = ? WHERE id = ? AND user_id = ? AND revoked_at_ms IS NULL RETURNING id", [now, id, userID]
        ).isEmpty
    }

    /// Revokes every live session of the account, but the one `except`.
    func revokeAll(_ tx: any SQLExecutor, userID: String, except: String? = nil, now: Date) async throws {
        if let except {
            try await tx.query(
                "UPDATE sessions SET revoked_at_ms = ? WHERE user_id = ? AND id <> ? AND revoked_at_ms IS NULL", [now, userID, except])
        } else {
            try await tx.query("UPDATE sessions SET revoked_at_ms = ? WHERE user_id = ? AND revoked_at_ms IS NULL", [now, userID])
        }
    }

    /// Forgets the devices and addresses the account's sessions were used from (erasure).
    func forgetDevices(_ tx: any SQLExecutor, userID: String) async throws {
        try await tx.query("UPDATE sessions SET user_agent = NULL, ip = NULL WHERE user_id = ?", [userID])
    }

    /// The session showed a second factor now.
    func markSecondFactor(_ tx: any SQLExecutor, sessionID: String, now: Date) async throws {
        try await tx.query("UPDATE sessions SET mfa_at_ms = ? WHERE id = ?", [now, sessionID])
    }

    /// When the session showed a second factor (nil: never).
    func secondFactorAt(_ database: any Database, sessionID: String, logger: Logger) async throws -> Date? {
        try await database.quickQuery("SELECT mfa_at_ms FROM sessions WHERE id = ?", [sessionID], logger: logger).first?.optionalDate("mfa_at_ms")
    }

    /// The profile the account's session acts as now (`.some(nil)`: none chosen), or nil when it is revoked; its row is
    /// then held, so that a revocation or a new choice waits for the transaction.
    func liveSelection(_ tx: any SQLExecutor, sessionID: String, userID: String) async throws -> String?? {
        try await tx.first(
            "SELECT selected_profile_id FROM sessions WHERE id = ? AND user_id = ? AND revoked_at_ms IS NULL" + tx.dialect.forShare,
            [sessionID, userID]
        ).map { $0.optionalString("selected_profile_id") }
    }

    /// When the live session last signed in or confirmed its password (nil: revoked or gone).
    func authenticatedAt(_ tx: any SQLExecutor, sessionID: String) async throws -> Date? {
        try await tx.first("SELECT authenticated_at_ms FROM sessions WHERE id = ? AND revoked_at_ms IS NULL", [sessionID])?.date(
            "authenticated_at_ms")
    }

    /// The session's user showed their password now (a recent authentication for sensitive actions); false when the
    /// session was revoked meanwhile.
    /// With `recent: false` it only checks that the session is live (and holds its row).
    @discardableResult
    func markAuthenticated(_ tx: any SQLExecutor, sessionID: String, now: Date, recent: Bool = true) async throws -> Bool {
        guard recent else {
            return try await tx.first("SELECT id FROM sessions WHERE id = ? AND revoked_at_ms IS NULL" + tx.dialect.forUpdate, [sessionID]) != nil
        }
        return try await !tx.query(
            "UPDATE sessions SET authenticated_at_ms = ? WHERE id = ? AND revoked_at_ms IS NULL RETURNING id", [now, sessionID]
        ).isEmpty
    }

    /// Every other live session of the account that chose `profileID` must choose again: its PIN changed, and a choice
    /// made with the old one no longer counts (a child who had unlocked the owner's profile keeps nothing). The
    /// selection then names no profile, which reads as "selection required" (as a deleted profile's does), never as the
    /// owner's.
    func requireReselection(_ tx: any SQLExecutor, profileID: String, userID: String, except sessionID: String?) async throws {
        try await tx.query(
            "UPDATE sessions SET selected_profile_id = ? WHERE user_id = ? AND selected_profile_id = ? AND revoked_at_ms IS NULL AND id <> ?",
            ["pin-changed:" + profileID, userID, profileID, sessionID ?? ""])
    }

    /// The family profile the session acts as.
    func select(_ tx: any SQLExecutor, profileID: String, sessionID: String) async throws {
        try await tx.query("UPDATE sessions SET selected_profile_id = ? WHERE id = ?", [profileID, sessionID])
    }
}
