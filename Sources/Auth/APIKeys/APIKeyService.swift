import Clock
import Foundation
import Logging
import Storage

/// A service credential. The secret is shown once at creation; only its SHA-256 is stored.
public struct APIKey: Sendable, Equatable {
    public let id: String
    public let name: String
    public let scopes: Set<String>
    public let createdAt: Date
    public let lastUsedAt: Date?
    public let revokedAt: Date?
    /// After this the key no longer authenticates (nil: never expires).
    public let expiresAt: Date?
    /// Neither revoked nor expired when it was read.
    public let isActive: Bool

    public func allows(_ scope: String) -> Bool { scopes.contains(scope) }

    init(row: SQLRow, now: Date) throws {
        id = try row.string("id")
        name = try row.string("name")
        scopes = Set(try row.string("scopes").split(separator: ",").map(String.init))
        createdAt = try row.date("created_at_ms")
        lastUsedAt = row.optionalDate("last_used_at_ms")
        revokedAt = row.optionalDate("revoked_at_ms")
        expiresAt = row.optionalDate("expires_at_ms")
        isActive = revokedAt == nil && (expiresAt.map { $0 > now } ?? true)
    }
}

/// Creates, lists, revokes and checks API keys (`Authorization: Bearer ask_…`).
public struct APIKeyService: Sendable {
    /// Every scope a key may carry.
    public static let knownScopes: Set<String> = ["admin", "ledger:write", "ledger:read", "entitlements:read"]
    public static let prefix = "ask_"
    /// How often a key's `last_used_at_ms` is written at most.
    static let touchIntervalSeconds: Double = 60
    let database: any Database
    let clock: any TimeSource
    /// The keys this process is touching now.
    static let touching = TouchesUnderWay(kind: "API key")

    public init(database: any Database, clock: any TimeSource) {
        self.database = database
        self.clock = clock
    }

    /// Who makes a key: the command line, an operator's session, or an operator's key (its parent).
    /// Who makes a key, and who acts as an operator over HTTP (an admin's session or a key with scope admin).
    public enum Creator: Sendable {
        case commandLine
        case session(AuthenticatedSession)
        case key(APIKey)

        /// The audit actor.
        public var actor: String {
            switch self {
            case .commandLine: "cli"
            case .session(let session): "user:" + session.user.id
            case .key(let key): "key:" + key.id
            }
        }
    }

    /// Returns the key and its secret (the only time the secret exists outside the caller). The credential that asked
    /// must still hold when the key is written: a session revoked (a reset) or a key revoked while the request was on its
    /// way makes nothing, so a stolen credential cannot leave a key behind that outlives it.
    public func create(
        name: String, scopes: [String], expiresAt: Date? = nil, actor: String = "cli", ip: String? = nil, createdBy creator: Creator = .commandLine,
        authorise: @escaping @Sendable (any SQLExecutor) async throws -> Void = { _ in }, logger: Logger
    ) async throws -> (APIKey, secret: String) {
        var expiresAt = expiresAt
        if case .key(let parent) = creator {
            // A key never outlives the key that made it (so an expiring operator key cannot leave a permanent one behind).
            if let limit = parent.expiresAt {
                if let asked = expiresAt, asked > limit {
                    throw AuthError.validation("Field 'expiresAt' must not be later than the creating key's expiry (\(limit)).")
                }
                expiresAt = expiresAt ?? limit
            }
        }
        let expiry = expiresAt
        let name = name.trimmingCharacters(in: .whitespacesAndNewlines)
        guard (1...100).contains(name.count) else { throw AuthError.validation("Key name must be 1 to 100 characters.") }
        let scopeSet = Set(scopes.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty })
        guard !scopeSet.isEmpty else { throw AuthError.validation("Give at least one scope: \(Self.knownScopes.sorted().joined(separator: ", ")).") }
        let unknown = scopeSet.subtracting(Self.knownScopes)
        guard unknown.isEmpty else {
            throw AuthError.validation(
                "Unknown scope(s) \(unknown.sorted().joined(separator: ", ")); known: \(Self.knownScopes.sorted().joined(separator: ", ")).")
        }
        guard name.utf8.count <= 200 else { throw AuthError.validation("Key name must be at most 200 bytes.") }
        if let expiry, expiry <= clock.now() { throw AuthError.validation("Field 'expiresAt' must be in the future.") }
        let secret = Self.prefix + SecretHasher.base64url(SecureRandom.bytes(32))
        let key = try await database.transaction(logger: logger) { tx in
            try await authorise(tx)
            let now = clock.now()
            let id = FreshID.uuid()
            // The parent is locked while its child is written (a revocation waits, then takes the child too), and a parent
            // revoked meanwhile makes nothing; so does a session revoked meanwhile.
            switch creator {
            case .key(let parent):
                guard try await tx.first("SELECT id FROM api_keys WHERE id = ? AND revoked_at_ms IS NULL" + tx.dialect.forUpdate, [parent.id]) != nil
                else { throw AuthError.unauthorized }
            case .session(let session): try await session.requireStillLive(tx, now: now)
            case .commandLine: break
            }
            let inserted = try await tx.query(
                "INSERT INTO api_keys (id, name, key_hash, scopes, created_at_ms, expires_at_ms, parent_id) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING *",
                [id, name, SecretHasher.tokenHash(secret), scopeSet.sorted().joined(separator: ","), now, expiry, creator.parentID])
            guard let row = inserted.first else { throw AuthError.unauthorized }
            try await AuditLog.record(
                tx, at: now, actor: actor, action: "api_key_created", subject: id, ip: ip, detail: scopeSet.sorted().joined(separator: ","))
            return try APIKey(row: row, now: now)
        }
        return (key, secret)
    }

    /// For a write another module makes in its own transaction: the key is still live there (a revocation or expiry that
    /// came while the request waited refuses the write).
    public func stillLive(_ key: APIKey) -> @Sendable (any SQLExecutor) async throws -> Void {
        let clock = self.clock
        return { tx in
            guard
                try await tx.first(
                    "SELECT id FROM api_keys WHERE id = ? AND revoked_at_ms IS NULL AND (expires_at_ms IS NULL OR expires_at_ms > ?)",
                    [key.id, clock.now()]
                ) != nil
            else { throw AuthError.unauthorized }
        }
    }

    public func list(logger: Logger) async throws -> [APIKey] {
        try await database.withConnection(logger: logger) { tx in
            let now = clock.now()
            return try await tx.query("SELECT * FROM api_keys ORDER BY created_at_ms LIMIT 1000").map { try APIKey(row: $0, now: now) }
        }
    }

    /// Revokes the key and every live key made under it (its children, theirs, …), each audited. Returns false when no
    /// live key has that id.
    public func revoke(id: String, actor: String = "cli", ip: String? = nil, logger: Logger) async throws -> Bool {
        try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            guard try await tx.first("SELECT id FROM api_keys WHERE id = ? AND revoked_at_ms IS NULL" + tx.dialect.forUpdate, [id]) != nil else {
                return false
            }
            let revoked = try await tx.query(
                """
                WITH RECURSIVE tree (id) AS (SELECT CAST(? AS TEXT) UNION SELECT k.id FROM api_keys k JOIN tree t ON k.parent_id = t.id)
                UPDATE api_keys SET revoked_at_ms = ? WHERE id IN (SELECT id FROM tree) AND revoked_at_ms IS NULL RETURNING id
                """, [id, now])
            for row in revoked {
                let revokedID = try row.string("id")
                try await AuditLog.record(
                    tx, at: now, actor: actor, action: "api_key_revoked", subject: revokedID, ip: ip, detail: revokedID == id ? nil : "parent " + id)
            }
            return true
        }
    }

    /// The live key for a bearer secret, or nil. `last_used_at` is written at most once a minute.
    public func authenticate(secret: String, logger: Logger) async throws -> APIKey? {
        guard let hash = Self.hash(secret: secret) else { return nil }
        guard
            let row = try await database.quickQuery(
                "SELECT * FROM api_keys WHERE key_hash = ? AND revoked_at_ms IS NULL AND (expires_at_ms IS NULL OR expires_at_ms > ?)",
                [hash, clock.now()], logger: logger
            ).first
        else { return nil }
        let key = try APIKey(row: row, now: clock.now())
        await touch(id: key.id, lastUsedAt: key.lastUsedAt, logger: logger)
        return key
    }

    /// Records a use of the key, at most once a minute.
    public func touch(id: String, lastUsedAt: Date?, logger: Logger) async {
        let now = clock.now()
        guard lastUsedAt.map({ now.timeIntervalSince($0) >= Self.touchIntervalSeconds }) ?? true else { return }
        let due = now.addingTimeInterval(-Self.touchIntervalSeconds)
        await Self.touching.once(id, logger: logger) {
            try await database.transaction(logger: logger) { tx in
                _ = try await tx.query(
                    "UPDATE api_keys SET last_used_at_ms = ? WHERE id = ? AND (last_used_at_ms IS NULL OR last_used_at_ms <= ?)", [now, id, due])
            }
        }
    }

    /// A query that finds the live key for `secret` holding `scope`, for a caller to run inside its own statement (the
    /// ledger's one-statement spend; PostgreSQL SQL): one row (`caller` = `callerPrefix` + id, `caller_id`,
    /// `caller_seen_at_ms`) or none. Nil when the secret cannot be a key. The caller then calls `touch`.
    /// `AuthFragmentTests` pins the columns.
    public static func scopedKeyQuery(secret: String, scope: String, callerPrefix: String, now: Date) -> (sql: String, binds: [String])? {
        guard let hash = hash(secret: secret) else { return nil }
        return (
            """
            SELECT ? || id AS caller, id AS caller_id, last_used_at_ms AS caller_seen_at_ms FROM api_keys
            WHERE key_hash = ? AND revoked_at_ms IS NULL AND position(',' || ? || ',' IN ',' || scopes || ',') > 0
                AND (expires_at_ms IS NULL OR expires_at_ms > ?::BIGINT)
            """, [callerPrefix, hash, scope, String(now.epochMilliseconds)]
        )
    }

    static func hash(secret: String) -> String? {
        guard secret.hasPrefix(prefix), secret.utf8.count <= 256 else { return nil }
        return SecretHasher.tokenHash(secret)
    }
}

extension APIKeyService.Creator {
    /// The key that made the new one, if a key did.
    var parentID: String? {
        if case .key(let parent) = self { parent.id } else { nil }
    }
}
