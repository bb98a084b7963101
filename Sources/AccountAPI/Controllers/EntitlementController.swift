import Auth
import Entitlements
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Metrics
import NIOCore
import Storage

/// Feature access, the entitlement snapshot and checks.
struct EntitlementController: Sendable {
    let entitlements: EntitlementService
    let auth: AuthService
    let authenticator: Authenticator

    struct CheckRequest: Decodable { let feature: String?; let packId: String?; let tokens: Int64? }

    func addRoutes(to router: Router<AppRequestContext>) {
        let batcher = sessionSnapshots()
        router.get("/api/user/feature-access", use: featureAccess)
        router.get("/api/entitlements") { request, context in try await snapshot(request, context: context, batcher: batcher) }
        router.post("/api/entitlements/check", use: check)
        router.get("/api/users/:id/entitlements", use: userSnapshot)
    }

    @Sendable func featureAccess(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<FeatureAccess> {
        let session = try await authenticator.session(request, context)
        return JSONResponse(try await entitlements.featureAccess(userID: session.user.id, logger: context.logger))
    }

    /// One statement finds the session and reads the snapshot; the session is then checked like any other.
    func snapshot(
        _ request: Request, context: AppRequestContext, batcher: PostgresBatchedStatement<String, SessionSnapshotRow>?
    ) async throws -> Response {
        let hash = try await authenticator.sessionTokenHash(request, context)
        let row: SQLRow?
        let snapshot: RenderedSnapshot?
        if let batcher {
            if let found = try await batcher.load(hash) {
                row = found.row
                snapshot = try await entitlements.render(found.row, now: found.now, withProfile: true, logger: context.logger)
            } else {
                (row, snapshot) = (nil, nil)
            }
        } else {
            let subject = SnapshotSubject(sql: AuthService.checkedSessionQuery, binds: [.text(hash)], withProfile: true)
            let found = try await entitlements.rendered(subject: subject, logger: context.logger)
            (row, snapshot) = (found?.subject, found?.snapshot)
        }
        try await auth.checkSession(row: row, logger: context.logger)
        guard let snapshot else { throw AuthError.unauthorized }
        return Self.conditional(snapshot, request: request)
    }

    @Sendable func check(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<CheckResult> {
        let session = try await authenticator.session(request, context)
        let profile = try await authenticator.permissions(session, context)
        var request = request
        let body = try await request.decodeJSON(CheckRequest.self, context: context)
        return JSONResponse(
            try await entitlements.check(
                userID: session.user.id, profile: profile, feature: body.feature, packID: body.packId, tokens: body.tokens, logger: context.logger))
    }

    @Sendable func userSnapshot(_ request: Request, context: AppRequestContext) async throws -> Response {
        _ = try await authenticator.requireScope("entitlements:read", request, context)
        let userID = try context.pathParameter("id")
        _ = try await auth.findUser(id: userID, logger: context.logger)
        guard let found = try await entitlements.rendered(subject: .user(userID), logger: context.logger) else {
            throw Problem.notFound("No such user.")
        }
        return Self.conditional(found.snapshot, request: request)
    }

    /// A session's row of the snapshot statement and the time it was read at.
    struct SessionSnapshotRow: Sendable { let row: SQLRow; let now: Date }

    /// PostgreSQL: concurrent snapshot requests share statements, up to 64 sessions in one (each row carries its token
    /// hash), on one dedicated connection per event loop (``PostgresBatchedStatement``). A statement costs PostgreSQL
    /// about 250 µs plus 20 µs per session, and on two cores that cost was the ceiling (docs/performance.md). A lone
    /// request starts at once. nil on SQLite, whose reads cost microseconds each.
    func sessionSnapshots() -> PostgresBatchedStatement<String, SessionSnapshotRow>? {
        let logger = Logger(label: "account-service.entitlements")
        // Made once, after `AppMetrics.bootstrap` (routes are registered after it).
        let statementsCounter = Counter(label: "entitlement_snapshot_statements")
        let sessionsCounter = Counter(label: "entitlement_snapshot_sessions")
        let sql = entitlements.statement(Self.sessions([]), now: Date(timeIntervalSince1970: 0), engine: .postgres).sql
        let clock = entitlements.clock
        return (entitlements.database as? Storage.PostgresDatabase)?.batchedStatement(sql: sql, maxBatch: 64, logger: logger) {
            [entitlements] hashes in
            let now = clock.now()
            statementsCounter.increment()
            sessionsCounter.increment(by: hashes.count)
            return (
                entitlements.binds(Self.sessions(hashes), now: now),
                { rows in
                    var found: [String: SessionSnapshotRow] = [:]
                    for row in rows { found[try row.string("token_hash")] = SessionSnapshotRow(row: row, now: now) }
                    return found
                }
            )
        }
    }

    /// The snapshot subject for several sessions at once (PostgreSQL).
    static func sessions(_ hashes: [String]) -> SnapshotSubject {
        SnapshotSubject(sql: AuthService.checkedSessionsQuery, binds: [.text(hashes.joined(separator: ","))], withProfile: true)
    }

    /// 200 with an ETag, or 304 when `If-None-Match` names the current one. Not stored by caches (`no-store`, personal data):
    /// clients keep the last body and send its ETag themselves.
    static func conditional(_ snapshot: RenderedSnapshot, request: Request) -> Response {
        let etag = snapshot.etag
        if let match = request.headers[.ifNoneMatch], match.split(separator: ",").contains(where: { $0.trimmingCharacters(in: .whitespaces) == etag })
        {
            return Response(status: .notModified, headers: [.eTag: etag])
        }
        return Response(
            status: .ok, headers: [.contentType: "application/json; charset=utf-8", .eTag: etag],
            body: .init(byteBuffer: ByteBuffer(bytes: snapshot.body)))
    }
}
