import Clock
import Foundation
import Logging
import Storage

extension AuthService {
    /// The session and its user for one token hash (bind: `SecretHasher.tokenHash(token)`); ``session(row:logger:)``
    /// turns its row into a live session. `selected_is_default` tells whether the session acts as the account's owner.
    static let sessionQuery = """
        SELECT \(sessionColumns), sp.is_default AS selected_is_default FROM sessions s JOIN users u ON u.id = s.user_id
        LEFT JOIN family_profiles sp ON sp.id = s.selected_profile_id WHERE s.token_hash = ?
        """

    /// The session columns ``checkSession(row:logger:)`` reads (and the selected profile), for statements that check the
    /// session but do not need it or its user (the entitlement snapshot).
    public static let checkedSessionQuery =
        "SELECT \(checkedSessionColumns) FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.token_hash = ?"

    /// ``checkedSessionQuery`` for several tokens at once (PostgreSQL): bind the token hashes joined by commas; each row
    /// also carries its `token_hash`.
    public static let checkedSessionsQuery = """
        SELECT s.token_hash, \(checkedSessionColumns) FROM unnest(string_to_array(?, ',')) AS h(token_hash)
        JOIN sessions s ON s.token_hash = h.token_hash JOIN users u ON u.id = s.user_id
        """

    static let checkedSessionColumns =
        "s.id AS session_id, s.last_used_at_ms, s.expires_at_ms, s.revoked_at_ms, s.selected_profile_id, u.id, u.deleted_at_ms"

    static let sessionColumns = """
        \(checkedSessionColumns), s.created_at_ms, s.authenticated_at_ms, u.email, u.name, u.email_verified, u.role,
        u.prompt_enhancement_enabled
        """

    /// The bind of the session queries for a bearer token; an empty or oversized token is refused before any query.
    public static func sessionTokenHash(_ token: String) throws -> String {
        guard !token.isEmpty, token.utf8.count <= 256 else { throw AuthError.unauthorized }
        return SecretHasher.tokenHash(token)
    }

    /// Finds the live session for a bearer token; slides its idle expiry (written at most once a minute).
    public func authenticate(token: String, logger: Logger) async throws -> AuthenticatedSession {
        let hash = try Self.sessionTokenHash(token)
        let row = try await database.quickQuery(Self.sessionQuery, [hash], logger: logger).first
        return try await session(row: row, logger: logger)
    }

    /// The live session in a row of ``sessionQuery`` (nil: no such token): revoked, expired, idle or deleted → 401.
    /// Slides the idle expiry when the last write is older than the touch interval.
    public func session(row: SQLRow?, logger: Logger) async throws -> AuthenticatedSession {
        let (row, usedAt) = try await checkSession(row: row, logger: logger)
        let selected = row.optionalString("selected_profile_id")
        return AuthenticatedSession(
            sessionID: try row.string("session_id"), user: try User(row: row), createdAt: try row.date("created_at_ms"), lastUsedAt: usedAt,
            expiresAt: min(try row.date("expires_at_ms"), usedAt.addingTimeInterval(policy.sessionIdleSeconds)),
            authenticatedAt: try row.date("authenticated_at_ms"), selectedProfileID: selected,
            isOwnerProfile: selected == nil || ((try? row.bool("selected_is_default")) ?? false),
            selectedProfileGone: selected != nil && (try? row.bool("selected_is_default")) == nil)
    }

    /// The checks of ``session(row:logger:)`` alone, on a row of ``sessionQuery`` or ``checkedSessionQuery``: 401 unless
    /// the session is live; slides its idle expiry the same way. Returns the row and when the session was last used.
    @discardableResult
    public func checkSession(row: SQLRow?, logger: Logger) async throws -> (row: SQLRow, lastUsedAt: Date) {
        let now = clock.now()
        guard let row, row.optionalInt("revoked_at_ms") == nil, row.optionalInt("deleted_at_ms") == nil else { throw AuthError.unauthorized }
        let lastUsed = try row.date("last_used_at_ms")
        guard now < (try row.date("expires_at_ms")), now < lastUsed.addingTimeInterval(policy.sessionIdleSeconds) else {
            throw AuthError.unauthorized
        }
        guard now.timeIntervalSince(lastUsed) >= policy.sessionTouchIntervalSeconds else { return (row, lastUsed) }
        let sessionID = try row.string("session_id")
        try await database.transaction(logger: logger) { tx in
            try await tx.query("UPDATE sessions SET last_used_at_ms = ? WHERE id = ? AND revoked_at_ms IS NULL", [now, sessionID])
        }
        return (row, now)
    }

    /// Account actions (sessions, password, the account itself, its token history) need the owner profile: a session on
    /// another profile sees its own things only.
    public func requireOwnerProfile(_ session: AuthenticatedSession) throws {
        if session.selectedProfileGone { throw AuthError.profileSelectionRequired }
        guard session.isOwnerProfile else { throw AuthError.ownerProfileRequired }
    }

    /// The account's live sessions with their devices and IPs (owner profile only).
    public func listSessions(of session: AuthenticatedSession, logger: Logger) async throws -> [SessionSummary] {
        try requireOwnerProfile(session)
        let now = clock.now()
        let rows = try await database.withConnection(logger: logger) { tx in
            try await tx.query(
                """
                SELECT id, created_at_ms, last_used_at_ms, expires_at_ms, user_agent, ip FROM sessions
                WHERE user_id = ? AND revoked_at_ms IS NULL AND expires_at_ms > ? AND last_used_at_ms > ?
                ORDER BY last_used_at_ms DESC LIMIT 200
                """, [session.user.id, now, now.addingTimeInterval(-policy.sessionIdleSeconds)])
        }
        return try rows.map { row in
            let lastUsed = try row.date("last_used_at_ms")
            return SessionSummary(
                id: try row.string("id"), createdAt: try row.date("created_at_ms"), lastUsedAt: lastUsed,
                expiresAt: min(try row.date("expires_at_ms"), lastUsed.addingTimeInterval(policy.sessionIdleSeconds)),
                userAgent: row.optionalString("user_agent"), ip: row.optionalString("ip"), current: try row.string("id") == session.sessionID)
        }
    }

    /// Revokes one of the account's sessions (another one needs the owner profile; another account's id is "not found").
    public func revokeSession(id: String, of session: AuthenticatedSession, client: ClientInfo, logger: Logger) async throws {
        if id != session.sessionID { try requireOwnerProfile(session) }
        let revoked = try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            let rows = try await tx.query(
                "UPDATE sessions SET revoked_at_ms = ? WHERE id = ? AND user_id = ? AND revoked_at_ms IS NULL RETURNING id",
                [now, id, session.user.id])
            if !rows.isEmpty {
                try await AuditLog.record(tx, at: now, actor: session.user.id, action: "session_revoked", subject: session.user.id, ip: client.ip)
            }
            return !rows.isEmpty
        }
        guard revoked else { throw AuthError.notFound }
    }

    public func signOut(_ session: AuthenticatedSession, client: ClientInfo, logger: Logger) async throws {
        try await revokeSession(id: session.sessionID, of: session, client: client, logger: logger)
    }
}
