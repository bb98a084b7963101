import Clock
import Foundation
import Logging
import Metrics
import Storage

/// Auth's sessions, for the reads that find the session in their own statement (filled at wiring).
public protocol SessionRows: Sendable {
    /// SQL finding the session for one token hash (one bind); its row goes to ``check(_:logger:)``.
    var sessionQuery: String { get }
    /// SQL finding the sessions for several token hashes joined by commas (PostgreSQL); each row also carries `token_hash`.
    var sessionsQuery: String { get }
    /// A column `profile_max_content_rating` for a statement over those rows (aliased `x`): the acting profile's maximum
    /// content rating; NULL when none is selected (the owner's), '' when it has none, `!` when the selection is gone.
    var profileRatingColumn: String { get }
    /// Auth's checks on the row found (nil: no such session): throws unless the session is live, as every
    /// authenticated request does; returns the row.
    func check(_ row: SQLRow?, logger: Logger) async throws -> SQLRow
}

/// An app's two most frequent reads, each answered with its session check by one statement: the entitlement snapshot and
/// the sticker catalog's version (its ETag). On PostgreSQL concurrent reads share statements, up to 64 sessions in
/// one, on one dedicated connection per event loop (``Storage/Database/sharedReads(sql:maxBatch:logger:prepare:)``): a
/// statement costs PostgreSQL about 250 µs plus 20 µs per session, and on two cores that cost was the ceiling
/// (docs/performance.md). A lone read starts at once. On SQLite each read is its own statement (microseconds).
/// Made once per process, after metrics are bootstrapped.
public struct SessionReads: Sendable {
    let entitlements: EntitlementService
    let content: StickerContentService
    let sessions: any SessionRows
    let snapshots: PostgresBatchedStatement<String, SessionRow>?
    let versions: PostgresBatchedStatement<String, SessionRow>?

    /// A session's row and the time it was read at.
    struct SessionRow: Sendable { let row: SQLRow; let now: Date }

    public init(entitlements: EntitlementService, content: StickerContentService, sessions: any SessionRows) {
        (self.entitlements, self.content, self.sessions) = (entitlements, content, sessions)
        let statements = Counter(label: "entitlement_snapshot_statements")
        let counted = Counter(label: "entitlement_snapshot_sessions")
        let many = SnapshotSubject(sql: sessions.sessionsQuery, binds: [], withProfile: true)
        let clock = entitlements.clock
        snapshots = entitlements.database.sharedReads(
            sql: entitlements.statement(many, now: Date(timeIntervalSince1970: 0), engine: .postgres).sql, maxBatch: 64,
            logger: Logger(label: "account-service.entitlements")
        ) { [entitlements] hashes in
            let now = clock.now()
            statements.increment()
            counted.increment(by: hashes.count)
            let subject = SnapshotSubject(sql: many.sql, binds: [.text(hashes.joined(separator: ","))], withProfile: true)
            return (entitlements.binds(subject, now: now), { try Self.byTokenHash($0, now: now) })
        }
        versions = content.database.sharedReads(
            sql: StickerStore.versionsQuery(sessions: sessions.sessionsQuery, profileRating: sessions.profileRatingColumn, engine: .postgres),
            maxBatch: 64, logger: Logger(label: "account-service.stickers")
        ) { hashes in
            let now = clock.now()
            return ([.text(hashes.joined(separator: ","))], { try Self.byTokenHash($0, now: now) })
        }
    }

    static func byTokenHash(_ rows: [SQLRow], now: Date) throws -> [String: SessionRow] {
        var found: [String: SessionRow] = [:]
        for row in rows { found[try row.string("token_hash")] = SessionRow(row: row, now: now) }
        return found
    }

    /// The signed-in user's entitlement snapshot (with their selected profile's permissions), for a session token's hash.
    public func snapshot(sessionTokenHash hash: String, logger: Logger) async throws -> RenderedSnapshot {
        let found: SessionRow?
        if let snapshots {
            found = try await snapshots.load(hash)
        } else {
            let now = entitlements.clock.now()
            let one = SnapshotSubject(sql: sessions.sessionQuery, binds: [.text(hash)], withProfile: true)
            let (sql, binds) = entitlements.statement(one, now: now, engine: entitlements.database.engine)
            found = try await entitlements.database.quickQuery(sql, binds, logger: logger).first.map { SessionRow(row: $0, now: now) }
        }
        let row = try await sessions.check(found?.row, logger: logger)
        return try await entitlements.render(
            row, now: found?.now ?? entitlements.clock.now(), withProfile: true, releasingExpiredHolds: true, logger: logger)
    }

    /// The signed-in user's id and sticker catalog version (see ``StickerContentService/catalogVersion(userID:viewer:logger:)``),
    /// the acting profile's maximum rating included; nil version when the session's profile selection is gone (the
    /// caller answers as every profile route does).
    public func catalogVersion(sessionTokenHash hash: String, logger: Logger) async throws -> (userID: String, version: String?) {
        let found: SQLRow?
        if let versions {
            found = try await versions.load(hash)?.row
        } else {
            let sql = StickerStore.versionsQuery(
                sessions: sessions.sessionQuery, profileRating: sessions.profileRatingColumn, engine: content.database.engine)
            found = try await content.database.quickQuery(sql, [hash], logger: logger).first
        }
        let row = try await sessions.check(found, logger: logger)
        let rating = row.optionalString("profile_max_content_rating")
        guard rating != "!" else { return (try row.string("id"), nil) }
        // '' is a selected profile without a maximum; a stored maximum off the scale counts as the strictest, as everywhere.
        let maximum = rating.flatMap { $0.isEmpty ? nil : ContentRating(text: $0) ?? .all }
        let viewer = ContentViewer(profileID: row.optionalString("selected_profile_id"), maxRating: maximum)
        return (try row.string("id"), try content.catalogVersion(row: row, viewer: viewer))
    }
}
