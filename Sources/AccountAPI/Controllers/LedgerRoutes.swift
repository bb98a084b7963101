import Auth
import Entitlements
import Foundation
import HTTPTypes
import Hummingbird
import Ledger
import Logging
import Storage

struct BalancesJSON: Codable, Sendable, Equatable {
    let bonusTokens: Int64
    let subscriptionTokens: Int64
    let purchasedTokens: Int64
    let heldTokens: Int64
    let totalTokens: Int64
    init(_ b: BucketBalances) {
        bonusTokens = b.bonusTokens
        subscriptionTokens = b.subscriptionTokens
        purchasedTokens = b.purchasedTokens
        heldTokens = b.heldTokens
        totalTokens = b.totalTokens
    }
}

struct LedgerResultJSON: Codable, Sendable {
    let operationId: String
    let userId: String
    let amount: Int64
    let balances: BalancesJSON
    init(_ r: LedgerResult) {
        operationId = r.operationId
        userId = r.userId
        amount = r.amount
        balances = BalancesJSON(r.balances)
    }
}

struct HoldJSON: Codable, Sendable {
    let id: String
    let userId: String
    let status: String
    let amount: Int64
    let capturedAmount: Int64?
    let expiresAt: String
    let resolvedAt: String?
    init(_ h: HoldState) {
        id = h.id
        userId = h.userId
        status = h.status
        amount = h.amount
        capturedAmount = h.capturedAmount
        expiresAt = AuthRoutes.iso(h.expiresAt)
        resolvedAt = h.resolvedAt.map(AuthRoutes.iso)
    }
}

/// Service endpoints that move tokens (API key scope `ledger:write`, `Idempotency-Key` required).
struct LedgerRoutes: Sendable {
    let ledger: Ledger
    let writer: IdempotentWrite
    let authenticator: Authenticator
    /// Spends through PostgreSQL's `ledger_spend_once` when possible (`LEDGER_ONE_STATEMENT_SPEND=false` turns it off).
    var oneStatementSpends = true

    struct GrantRequest: Codable { let userId: String; let amount: Int64; let bucket: Bucket; let reason: String?; let expiresAt: String?; let metadata: JSONValue? }
    struct SpendRequest: Codable { let userId: String; let amount: Int64; let reason: String; let metadata: JSONValue? }
    struct HoldRequest: Codable { let userId: String; let amount: Int64; let ttlSeconds: Int?; let reason: String; let metadata: JSONValue? }
    struct CaptureRequest: Codable { let amount: Int64? }

    func register(on router: Router<AppRequestContext>) {
        router.post("/api/ledger/grants") { request, context in
            let caller = try await caller(request, context)
            var request = request
            let body = try await request.decodeJSON(GrantRequest.self, context: context)
            return try await grant(body, caller: caller, request: request, context: context, endpoint: "grants")
        }
        userWrite(router, "/api/ledger/spend", SpendRequest.self, endpoint: "spend", status: .ok, userID: \.userId, first: oneStatementSpend) { tx, body in
            LedgerResultJSON(
                try await ledger.spend(tx, userID: body.userId, amountTokens: body.amount, reason: body.reason, metadata: body.metadata?.canonicalText))
        }
        userWrite(router, "/api/ledger/holds", HoldRequest.self, endpoint: "holds", status: .created, userID: \.userId) { tx, body in
            HoldJSON(
                try await ledger.hold(
                    tx, userID: body.userId, amountTokens: body.amount, ttlSeconds: body.ttlSeconds ?? LedgerLimits.holdTTLSecondsDefault,
                    reason: body.reason, metadata: body.metadata?.canonicalText))
        }
        router.post("/api/ledger/holds/:id/capture") { request, context in
            let caller = try await caller(request, context)
            let id = try context.parameters.require("id")
            var request = request
            let body = try await request.decodeJSON(CaptureRequest.self, context: context, emptyMeans: "{}")
            return try await writer.run(
                caller: caller, request: request, fields: canonicalFields(body, extra: ["endpoint": "capture", "holdId": id]), status: .ok,
                logger: context.logger
            ) { tx in HoldJSON(try await ledger.capture(tx, holdID: id, amountTokens: body.amount)) }
        }
        router.post("/api/ledger/holds/:id/void") { request, context in
            let caller = try await caller(request, context)
            let id = try context.parameters.require("id")
            return try await writer.run(
                caller: caller, request: request, fields: ["endpoint": "void", "holdId": id], status: .ok, logger: context.logger
            ) { tx in HoldJSON(try await ledger.void(tx, holdID: id)) }
        }
    }

    /// Registers an idempotent write on one user's tokens: scope check, body decoding, unknown-user 404.
    func userWrite<Body: Codable & Sendable, Result: Encodable & Sendable>(
        _ router: Router<AppRequestContext>, _ path: RouterPath, _ type: Body.Type, endpoint: String, status: HTTPResponse.Status,
        userID: any KeyPath<Body, String> & Sendable,
        first: (@Sendable (inout Request, AppRequestContext) async throws -> Response?)? = nil,
        _ operation: @escaping @Sendable (any SQLExecutor, Body) async throws -> Result
    ) {
        router.post(path) { request, context in
            var request = request
            if let first, let response = try await first(&request, context) { return response }
            let caller = try await caller(request, context)
            let body = try await request.decodeJSON(Body.self, context: context)
            return try await writer.run(
                caller: caller, request: request, fields: canonicalFields(body, extra: ["endpoint": endpoint]), status: status, logger: context.logger
            ) { tx in
                do {
                    return try await operation(tx, body)
                } catch LedgerError.insufficientTokens(availableTokens: 0) {
                    // Only an empty balance can mean "no such user": check then (off the fast path), so an
                    // unknown id is a 404 rather than a remembered 402.
                    try await Self.requireUser(tx, body[keyPath: userID])
                    throw LedgerError.insufficientTokens(availableTokens: 0)
                }
            }
        }
    }

    /// PostgreSQL: a well-formed spend with a live `ledger:write` key is answered by one statement (the key check,
    /// the idempotency lookup, the spend and its stored response). Nil → the ordinary path answers, which it does for
    /// everything else: any input error, an unknown key (401 / 403 first, as always), and every case the statement
    /// declines without writing (too few tokens, holds or lots to settle, accounts not created yet).
    @Sendable func oneStatementSpend(_ request: inout Request, _ context: AppRequestContext) async throws -> Response? {
        guard oneStatementSpends, writer.database.engine == .postgres, let secret = Authenticator.bearerToken(request),
            let keyQuery = APIKeyService.scopedKeyQuery(secret: secret, scope: "ledger:write", callerPrefix: "key:"),
            let key = try? IdempotentWrite.key(request)
        else { return nil }
        do {
            _ = try await request.rawBody(context: context)  // collected once; the ordinary path reads it again
        } catch {
            _ = try await caller(request, context)  // 401 / 403 before 413, as on the ordinary path
            throw error
        }
        guard let body = try? await request.decodeJSON(SpendRequest.self, context: context) else { return nil }
        let fields = canonicalFields(body, extra: ["endpoint": "spend"])
        let requestJSON = try IdempotencyStore.requestJSON(fields)
        let answer: OneStatementAnswer
        do {
            answer = try await writer.database.withConnection(logger: context.logger) { connection in
                try await ledger.spendInOneStatement(
                    connection, caller: .query(sql: keyQuery.sql, binds: keyQuery.binds), key: key, requestJSON: requestJSON,
                    status: Int(HTTPResponse.Status.ok.code), userID: body.userId, amountTokens: body.amount, reason: body.reason,
                    metadata: body.metadata?.canonicalText
                ) { try IdempotentWrite.encode(LedgerResultJSON($0)) }
            }
        } catch StorageError.uniqueViolation {
            return nil  // the same key raced in from another request: the ordinary path replays it
        }
        guard answer.callerFound else { return nil }
        if let id = answer.callerID { try await authenticator.apiKeys.touch(id: id, lastUsedAt: answer.callerSeenAt, logger: context.logger) }
        return try IdempotentWrite.response(answer.outcome, status: .ok, fields: fields)
    }

    func caller(_ request: Request, _ context: AppRequestContext) async throws -> String {
        "key:" + (try await authenticator.requireScope("ledger:write", request, context)).id
    }

    func grant(_ body: GrantRequest, caller: String, request: Request, context: AppRequestContext, endpoint: String) async throws -> Response {
        var expiresAt: Date?
        if let raw = body.expiresAt {
            guard let date = ISO8601DateFormatter.parse(raw) else { throw Problem.validation("expiresAt must be an ISO-8601 date-time.") }
            expiresAt = date
        }
        let expiry = expiresAt
        return try await writer.run(
            caller: caller, request: request, fields: canonicalFields(body, extra: ["endpoint": endpoint]), status: .created, logger: context.logger
        ) { tx in
            try await Self.requireUser(tx, body.userId)
            return LedgerResultJSON(
                try await ledger.grant(
                    tx, userID: body.userId, amountTokens: body.amount, bucket: body.bucket, reason: body.reason ?? "grant", expiresAt: expiry,
                    metadata: body.metadata?.canonicalText))
        }
    }

    /// Unknown (or erased) users are 404s, not silent new ledger accounts.
    static func requireUser(_ tx: any SQLExecutor, _ userID: String) async throws {
        guard try await tx.first("SELECT id FROM users WHERE id = ? AND deleted_at_ms IS NULL", [userID]) != nil else {
            throw Problem.notFound("No user with id \(userID).")
        }
    }
}

/// The signed-in user's tokens.
struct TokenRoutes: Sendable {
    let database: any Database
    let ledger: Ledger
    let subscriptions: SubscriptionStore
    let clock: any TimeSource
    let authenticator: Authenticator

    /// The seed's `TokenBalance` plus `bonusTokens` and `heldTokens`.
    struct TokenBalanceJSON: Encodable, Sendable {
        let subscriptionTokens: Int64
        let purchasedTokens: Int64
        let totalTokens: Int64
        let lastSubscriptionRefresh: String?
        let maxRollover: Int
        let currentPlan: SubscriptionPlan?
        let bonusTokens: Int64
        let heldTokens: Int64
    }
    struct HistoryEntryJSON: Encodable, Sendable {
        let id: String; let amount: Int64; let bucket: String?; let reason: String; let createdAt: String; let balanceAfter: Int64?; let metadata: JSONValue?
    }
    struct HistoryJSON: Encodable, Sendable { let entries: [HistoryEntryJSON]; let nextCursor: String? }

    func register(on router: Router<AppRequestContext>) {
        router.get("/api/user/token-balance") { request, context in
            let session = try await authenticator.session(request, context)
            return JSONResponse(try await balance(userID: session.user.id, logger: context.logger))
        }
        router.get("/api/user/token-history") { request, context in
            let session = try await authenticator.session(request, context)
            try authenticator.auth.requireOwnerProfile(session)
            return JSONResponse(try await history(userID: session.user.id, request: request, logger: context.logger))
        }
    }

    func balance(userID: String, logger: Logger) async throws -> TokenBalanceJSON {
        try await database.transaction(logger: logger) { tx in
            let balances = try await ledger.balances(tx, userID: userID)
            let plan = try await subscriptions.currentPlan(userID: userID, now: clock.now(), tx)
            return TokenBalanceJSON(
                subscriptionTokens: balances.subscriptionTokens, purchasedTokens: balances.purchasedTokens, totalTokens: balances.totalTokens,
                lastSubscriptionRefresh: try await ledger.lastSubscriptionRefresh(tx, userID: userID).map(AuthRoutes.iso), maxRollover: plan.maxRollover,
                currentPlan: plan, bonusTokens: balances.bonusTokens, heldTokens: balances.heldTokens)
        }
    }

    func history(userID: String, request: Request, logger: Logger) async throws -> HistoryJSON {
        let limit = try request.uri.queryParameters["limit"].map { raw -> Int in
            guard let n = Int(String(raw)), (1...LedgerLimits.historyPageMax).contains(n) else {
                throw Problem.validation("limit must be from 1 to \(LedgerLimits.historyPageMax).")
            }
            return n
        } ?? 50
        let cursor = try request.uri.queryParameters["cursor"].map { raw -> Int64 in
            guard let n = Int64(String(raw)), n > 0 else { throw Problem.validation("cursor must be a value returned as nextCursor.") }
            return n
        }
        let page = try await database.withConnection(logger: logger) { tx in try await ledger.history(tx, userID: userID, limit: limit, cursor: cursor) }
        return HistoryJSON(
            entries: page.entries.map {
                HistoryEntryJSON(
                    id: $0.id, amount: $0.amount, bucket: $0.bucket, reason: $0.reason, createdAt: AuthRoutes.iso($0.createdAt),
                    balanceAfter: $0.balanceAfter, metadata: JSONValue.parse($0.metadata))
            }, nextCursor: page.nextCursor.map(String.init))
    }
}
