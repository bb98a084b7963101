import Auth
import Entitlements
import Foundation
import HTTPTypes
import Hummingbird
import Ledger
import Logging
import Metrics
import NIOCore
import Storage

extension EntitlementError {
    var problem: Problem {
        switch self {
        case .packNotFound: Problem.notFound("No such sticker pack.")
        case .alreadyUnlocked(let detail): Problem(.conflict, code: "already_unlocked", detail: detail)
        case .purchaseNotAllowed:
            Problem(.forbidden, code: "purchase_not_allowed", detail: "This profile cannot make purchases; switch to a profile that can.")
        case .invalid(let problems): Problem.validation(problems.joined(separator: "; "))
        }
    }
}

/// A pack as apps see it: the seed's `StickerPack` plus `isPremium` and `tokenPrice`.
struct StickerPackJSON: Encodable, Sendable {
    let id: String; let name: String; let description: String?; let iconUrl: String?; let category: String; let stickerCount: Int64
    let isLocked: Bool; let previewStickers: [String]; let isPremium: Bool; let tokenPrice: Int64
    init(_ p: StickerPack, isLocked: Bool) {
        id = p.id
        name = p.name
        description = p.description
        iconUrl = p.iconUrl
        category = p.category
        stickerCount = p.stickerCount
        self.isLocked = isLocked
        previewStickers = p.previewStickers
        isPremium = p.isPremium
        tokenPrice = p.tokenPrice
    }
}

/// Feature access, the entitlement snapshot and checks, sticker packs and unlocks.
struct EntitlementRoutes: Sendable {
    let database: any Database
    let entitlements: EntitlementService
    let ledger: Ledger
    let auth: AuthService
    let writer: IdempotentWrite
    let authenticator: Authenticator
    let clock: any TimeSource

    struct CheckRequest: Decodable { let feature: String?; let packId: String?; let tokens: Int64? }
    struct PacksResponse: Encodable, Sendable { let packs: [StickerPackJSON] }
    struct UnlockResponse: Codable, Sendable { let packId: String; let unlocked: Bool; let tokensSpent: Int64; let balances: BalancesJSON? }

    func register(on router: Router<AppRequestContext>) {
        router.get("/api/user/feature-access") { request, context in
            let session = try await authenticator.session(request, context)
            return JSONResponse(try await database.withConnection(logger: context.logger) { try await entitlements.featureAccess($0, userID: session.user.id) })
        }
        let batcher = sessionSnapshots()
        router.get("/api/entitlements") { request, context in
            // One statement finds the session and reads the snapshot; the session is then checked like any other.
            let hash = try authenticator.sessionTokenHash(request)
            let row: SQLRow?
            let snapshot: RenderedSnapshot?
            if let batcher {
                if let found = try await batcher.load(hash) {
                    row = found.row
                    snapshot = try await entitlements.render(found.row, now: found.now, withProfile: true, reading: database, logger: context.logger)
                } else {
                    (row, snapshot) = (nil, nil)
                }
            } else {
                let subject = SnapshotSubject(sql: AuthService.checkedSessionQuery, binds: [.text(hash)], withProfile: true)
                let found = try await entitlements.rendered(reading: database, subject: subject, logger: context.logger)
                (row, snapshot) = (found?.subject, found?.snapshot)
            }
            try await auth.checkSession(row: row, logger: context.logger)
            guard let snapshot else { throw AuthError.unauthorized }
            return Self.conditional(snapshot, request: request)
        }
        router.post("/api/entitlements/check") { request, context in
            let session = try await authenticator.session(request, context)
            let profile = try await authenticator.permissions(session, context)
            var request = request
            let body = try await request.decodeJSON(CheckRequest.self, context: context)
            guard body.feature != nil || body.packId != nil || body.tokens != nil else {
                throw Problem.validation("Give at least one of feature, packId or tokens.")
            }
            return JSONResponse(
                try await database.readTransaction(logger: context.logger) { tx in
                    try await entitlements.check(tx, userID: session.user.id, profile: profile, feature: body.feature, packID: body.packId, tokens: body.tokens)
                })
        }
        router.get("/api/users/:id/entitlements") { request, context in
            _ = try await authenticator.requireScope("entitlements:read", request, context)
            let userID = try context.parameters.require("id")
            _ = try await auth.findUser(id: userID, logger: context.logger)
            guard let found = try await entitlements.rendered(reading: database, subject: .user(userID), logger: context.logger) else {
                throw Problem.notFound("No such user.")
            }
            return Self.conditional(found.snapshot, request: request)
        }
        router.get("/api/stickers/packs") { request, context in
            let session = try await authenticator.session(request, context)
            return JSONResponse(try await packList(userID: session.user.id, logger: context.logger))
        }
        router.post("/api/stickers/packs/:id/unlock") { request, context in
            let session = try await authenticator.session(request, context)
            let packID = try context.parameters.require("id")
            let profile = try await authenticator.permissions(session, context)
            let userID = session.user.id
            let operation: @Sendable (any SQLExecutor) async throws -> UnlockResponse = { tx in
                let plan = try await entitlements.subscriptions.currentPlan(userID: userID, now: clock.now(), tx)
                let spent = try await entitlements.packs.unlock(
                    tx, ledger: ledger, userID: userID, packID: packID, plan: plan, canMakePurchases: profile?.canMakePurchases ?? true)
                return UnlockResponse(packId: packID, unlocked: true, tokensSpent: spent?.amount ?? 0, balances: spent.map { BalancesJSON($0.balances) })
            }
            guard request.headers[.idempotencyKey] != nil else {
                do { return try await JSONResponse(database.transaction(logger: context.logger, operation)).response(from: request, context: context) }
                catch let error as LedgerError { throw error.problem }
            }
            return try await writer.run(
                caller: "user:\(userID)", request: request, fields: ["endpoint": "unlock", "packId": packID], status: .ok, logger: context.logger,
                operation)
        }
    }


    /// A session's row of the snapshot statement and the time it was read at.
    struct SessionSnapshotRow: Sendable { let row: SQLRow; let now: Date }

    /// PostgreSQL: concurrent snapshot requests share statements, up to 64 sessions in one (each row carries its token
    /// hash), on one dedicated connection per event loop (``PostgresBatchedStatement``). A statement costs PostgreSQL
    /// about 250 µs plus 20 µs per session, and on two cores that cost was the ceiling (see README, Benchmarks). A lone
    /// request starts at once. nil on SQLite, whose reads cost microseconds each.
    func sessionSnapshots() -> PostgresBatchedStatement<String, SessionSnapshotRow>? {
        let logger = Logger(label: "account-service.entitlements")
        // Made once, after `AppMetrics.bootstrap` (routes are registered after it).
        let statementsCounter = Counter(label: "entitlement_snapshot_statements")
        let sessionsCounter = Counter(label: "entitlement_snapshot_sessions")
        let sql = entitlements.statement(Self.sessions([]), now: Date(timeIntervalSince1970: 0), engine: .postgres).sql
        return (database as? Storage.PostgresDatabase)?.batchedStatement(sql: sql, maxBatch: 64, logger: logger) { [entitlements, clock] hashes in
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

    func packList(userID: String, logger: Logger) async throws -> PacksResponse {
        try await database.readTransaction(logger: logger) { tx in
            let plan = try await entitlements.subscriptions.currentPlan(userID: userID, now: clock.now(), tx)
            let bought = try await entitlements.packs.unlockedIDs(tx, userID: userID)
            return PacksResponse(
                packs: try await entitlements.packs.all(tx, activeOnly: true).map {
                    StickerPackJSON($0, isLocked: entitlements.packs.isLocked($0, plan: plan, bought: bought))
                })
        }
    }

    /// 200 with an ETag, or 304 when `If-None-Match` names the current one. Not stored by caches (`no-store`, personal data):
    /// clients keep the last body and send its ETag themselves.
    static func conditional(_ snapshot: RenderedSnapshot, request: Request) -> Response {
        let etag = snapshot.etag
        if let match = request.headers[.ifNoneMatch], match.split(separator: ",").contains(where: { $0.trimmingCharacters(in: .whitespaces) == etag }) {
            return Response(status: .notModified, headers: [.eTag: etag])
        }
        return Response(
            status: .ok, headers: [.contentType: "application/json; charset=utf-8", .eTag: etag],
            body: .init(byteBuffer: ByteBuffer(bytes: snapshot.body)))
    }
}
