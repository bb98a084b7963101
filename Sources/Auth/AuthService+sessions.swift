import Clock
import Foundation
import Logging
import Storage

extension AuthService {
    /// The session and its user for one token hash (bind: `SecretHasher.tokenHash(token)`); ``session(row:logger:)``
    /// turns its row into a live session. `selected_is_default` tells whether the session acts as the account's owner.
    static let sessionQuery = SessionStore.lookup

    /// The session columns ``checkSession(row:logger:)`` reads (and the selected profile), for statements that check the
    /// session but do not need it or its user (the entitlement snapshot).
    public static let checkedSessionQuery = SessionStore.checkedLookup

    /// ``checkedSessionQuery`` for several tokens at once (PostgreSQL): bind the token hashes joined by commas; each row
    /// also carries its `token_hash`.
    public static let checkedSessionsQuery = SessionStore.checkedLookups

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
        let due = now.addingTimeInterval(-policy.sessionTouchIntervalSeconds)
        await SessionStore.touching.once(sessionID, logger: logger) {
            try await database.transaction(logger: logger) { tx in
                try await sessions.touch(tx, sessionID: sessionID, now: now, due: due)
            }
        }
        return (row, now)
    }

    /// Account actions (sessions, password, the account itself, its token history) need the owner profile: a session on
    /// another profile sees its own things only.
    public func requireOwnerProfile(_ session: AuthenticatedSession) throws {
        if session.selectedProfileGone { throw AuthError.profileSelectionRequired }
        guard session.isOwnerProfile else { throw AuthError.ownerProfileRequired }
    }

    /// A write the session asked for, in one transaction that first checks the session still holds
    /// (``AuthenticatedSession/requireStillLive(_:)``).
    func sessionTransaction<T: Sendable>(
        _ session: AuthenticatedSession, logger: Logger, _ body: @escaping @Sendable (any SQLExecutor) async throws -> T
    ) async throws -> T {
        try await database.transaction(logger: logger) { tx in
            try await session.requireStillLive(tx, now: clock.now())
            return try await body(tx)
        }
    }

    /// The same check for a write another module makes in its own transaction: it runs this first.
    public func stillLive(_ session: AuthenticatedSession) -> @Sendable (any SQLExecutor) async throws -> Void {
        let clock = self.clock
        return { tx in try await session.requireStillLive(tx, now: clock.now()) }
    }

    /// The account's live sessions with their devices and IPs (owner profile only).
    public func listSessions(of session: AuthenticatedSession, logger: Logger) async throws -> [SessionSummary] {
        try requireOwnerProfile(session)
        return try await sessions(ofUser: session.user.id, logger: logger).map { row in
            SessionSummary(
                id: row.id, createdAt: row.createdAt, lastUsedAt: row.lastUsedAt, expiresAt: row.expiresAt, userAgent: row.userAgent, ip: row.ip,
                current: row.id == session.sessionID)
        }
    }

    /// Revokes one of the account's sessions (another one needs the owner profile; another account's id is "not found").
    public func revokeSession(id: String, of session: AuthenticatedSession, client: ClientInfo, logger: Logger) async throws {
        if id != session.sessionID { try requireOwnerProfile(session) }
        let revoked = try await sessionTransaction(session, logger: logger) { tx in
            let now = clock.now()
            guard try await sessions.revoke(tx, id: id, userID: session.user.id, now: now) else { return false }
            try await AuditLog.record(tx, at: now, actor: session.user.id, action: "session_revoked", subject: session.user.id, ip: client.ip)
            return true
        }
        guard revoked else { throw AuthError.notFound }
    }

    public func signOut(_ session: AuthenticatedSession, client: ClientInfo, logger: Logger) async throws {
        try await revokeSession(id: session.sessionID, of: session, client: client, logger: logger)
    }
}

extension AuthService {
    /// An operator's view of a user's live sessions (app and console), most recently used first.
    public func sessions(ofUser userID: String, logger: Logger) async throws -> [SessionSummary] {
        let now = clock.now()
        let listed = try await database.withConnection(logger: logger) { tx in
            try await sessions.live(tx, userID: userID, now: now, idleSince: now.addingTimeInterval(-policy.sessionIdleSeconds))
        }
        return listed.map { row in
            SessionSummary(
                id: row.id, createdAt: row.createdAt, lastUsedAt: row.lastUsedAt,
                expiresAt: min(row.expiresAt, row.lastUsedAt.addingTimeInterval(policy.sessionIdleSeconds)), userAgent: row.userAgent, ip: row.ip,
                current: false)
        }
    }

    /// Signs the account out everywhere, in the caller's transaction (a password reset or change, an address change, an
    /// operator's or Apple's revoke-all): every unfinished two-factor sign-in is ended (waiting for one being finished),
    /// then the account's row is locked against updates, then every session but `except` is revoked. A password sign-in
    /// (app or console) locks that row the same way and checks its hash again under it; a two-factor sign-in locks its
    /// challenge row. So a sign-in whose password check ran before a reset either commits first, and is revoked here, or
    /// finds the new hash (or its challenge ended) and is refused: no session from the old password outlives the reset (an
    /// outside tester kept 1-3 alive by signing in during one). The row lock is `FOR NO KEY UPDATE`, which a new
    /// session's reference to the row does not wait for, and the challenges come first, so neither forms a cycle with a
    /// two-factor sign-in (challenge, factor, then the session). An Apple sign-in locks its link, which Apple's
    /// consent-revoked deletes before calling this. Passkey sign-ins are not re-checked: nothing here changes a passkey.
    func signOutEverywhere(_ tx: any SQLExecutor, userID: String, except: String? = nil, now: Date) async throws {
        try await tx.query("UPDATE mfa_challenges SET used_at_ms = ? WHERE user_id = ? AND used_at_ms IS NULL", [now, userID])
        _ = try await users.passwordHash(tx, id: userID, lock: true)
        try await sessions.revokeAll(tx, userID: userID, except: except, now: now)
        // Signing out every session ends what they started: a pending address change or authenticator enrolment.
        if except == nil {
            try await tx.query("DELETE FROM email_changes WHERE user_id = ?", [userID])
            try await tx.query("DELETE FROM totp_factors WHERE user_id = ? AND enabled_at_ms IS NULL", [userID])
        }
    }

    /// An operator revokes one of a user's sessions (`sessionID`) or all of them (nil), audited. False when there was no
    /// such live session (one) — revoking all always succeeds.
    public func revokeSessions(ofUser userID: String, sessionID: String?, actor: String, ip: String?, logger: Logger) async throws -> Bool {
        try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            if let sessionID {
                guard try await sessions.revoke(tx, id: sessionID, userID: userID, now: now) else { return false }
            } else {
                try await signOutEverywhere(tx, userID: userID, now: now)
            }
            try await AuditLog.record(
                tx, at: now, actor: actor, action: sessionID == nil ? "sessions_revoked_by_operator" : "session_revoked_by_operator", subject: userID,
                ip: ip, detail: sessionID)
            return true
        }
    }
}

extension AuthenticatedSession {
    /// In the transaction of a write this session asked for: under the account's row lock (the lock every
    /// sign-out-everywhere takes: a reset, a password change, an operator's revoke, an erasure) and its own row's, the
    /// session must still be live and unexpired (else 401), and still act as the profile it did (else 403
    /// `profile_selection_required`: a new PIN made it choose again). A security event that lands while the request
    /// checked a password, waited for a hashing slot or checked a code wins, and nothing the session asked for is
    /// written. Call it first, before other row locks. `reselecting`: the write is the session choosing its profile
    /// anew, so the one it acted as does not matter.
    func requireStillLive(_ tx: any SQLExecutor, now: Date, reselecting: Bool = false) async throws {
        guard now < expiresAt, try await UserStore().isLive(tx, id: user.id, lock: true),
            let selection = try await SessionStore().liveSelection(tx, sessionID: sessionID, userID: user.id)
        else { throw AuthError.unauthorized }
        guard reselecting || selection == selectedProfileID else { throw AuthError.profileSelectionRequired }
    }
}
