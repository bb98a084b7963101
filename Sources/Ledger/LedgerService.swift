import Clock
import Events
import Foundation
import Logging
import Storage

/// Who the ledger may credit and charge. The owner of users (Auth) implements it; the ledger asks inside its own
/// transaction, so a user erased meanwhile is never credited.
public protocol LedgerUserDirectory: Sendable {
    /// True when `userID` is a live (not erased) user. `lock`: the account's row is share-locked, so an erasure waits for
    /// a write that asked first (ask before taking the ledger's locks); without it, only a refusal's answer is decided by
    /// it (asked after the ledger's locks, nothing posted).
    func isActiveUser(_ userID: String, _ tx: any SQLExecutor, lock: Bool) async throws -> Bool
}

extension LedgerUserDirectory {
    func isActiveUser(_ userID: String, _ tx: any SQLExecutor) async throws -> Bool { try await isActiveUser(userID, tx, lock: true) }
}

/// An idempotent write's identity: the caller's key space, its `Idempotency-Key`, and the request's fields (canonical
/// JSON text each) that a replay must match.
public struct IdempotentRequest: Sendable {
    public let caller: String
    public let key: String
    public let fields: [String: String]

    public init(caller: String, key: String, fields: [String: String]) {
        self.caller = caller
        self.key = key
        self.fields = fields
    }
}

/// The ledger's operations as services and operators call them: each one transaction, idempotent per key, with unknown
/// or erased users answered `userNotFound` (never a silent new account) and operator grants audited in the same
/// transaction.
public struct LedgerService: Sendable {
    public let database: any Database
    public let ledger: Ledger
    public let idempotency: IdempotencyStore
    let users: any LedgerUserDirectory
    let audit: any AuditTrail
    public let clock: any TimeSource
    /// The owner of API keys, for spends checked in one statement (``spend(_:key:fields:userID:amountTokens:reason:metadata:logger:)``).
    let callerKeys: (any LedgerCallerKeys)?
    /// PostgreSQL spends in one statement when a key is presented (`LEDGER_ONE_STATEMENT_SPEND=false` turns it off).
    let oneStatementSpends: Bool

    public init(
        database: any Database, ledger: Ledger, idempotency: IdempotencyStore, users: any LedgerUserDirectory, audit: any AuditTrail,
        clock: any TimeSource, callerKeys: (any LedgerCallerKeys)? = nil, oneStatementSpends: Bool = true
    ) {
        self.database = database
        self.ledger = ledger
        self.idempotency = idempotency
        self.users = users
        self.audit = audit
        self.clock = clock
        self.callerKeys = callerKeys
        self.oneStatementSpends = oneStatementSpends
    }

    /// Who grants: a service (its API key) or an operator. Every grant is audited with its actor.
    public enum Granter: Sendable {
        case service(String, ip: String?)
        case operatorActor(String, ip: String?)
    }

    public func grant(
        _ request: IdempotentRequest, userID: String, amountTokens: Int64, bucket: Bucket, reason: String, expiresAt: Date?, metadata: String?,
        by granter: Granter, logger: Logger
    ) async throws -> IdempotentResult<LedgerResult> {
        try await run(request, lane: Ledger.lane(userID: userID), logger: logger) { tx in
            guard try await users.isActiveUser(userID, tx) else { throw LedgerError.userNotFound(userID) }
            let result = try await ledger.grant(
                tx, userID: userID, amountTokens: amountTokens, bucket: bucket, reason: reason, expiresAt: expiresAt, metadata: metadata,
                idempotencyKey: request.key)
            let (actor, ip, action) =
                switch granter {
                case .service(let actor, let ip): (actor, ip, "service_token_grant")
                case .operatorActor(let actor, let ip): (actor, ip, "admin_token_grant")
                }
            try await audit.record(
                tx, at: clock.now(), actor: actor, action: action, subject: userID, ip: ip, detail: "\(amountTokens) \(bucket.rawValue)")
            return result
        }
    }

    public func hold(
        _ request: IdempotentRequest, userID: String, amountTokens: Int64, ttlSeconds: Int, reason: String, metadata: String?, logger: Logger
    ) async throws -> IdempotentResult<HoldState> {
        try await run(request, lane: Ledger.lane(userID: userID), logger: logger) { tx in
            try await knownUser(userID, tx) {
                try await ledger.hold(
                    tx, userID: userID, amountTokens: amountTokens, ttlSeconds: ttlSeconds, reason: reason, metadata: metadata,
                    idempotencyKey: request.key)
            }
        }
    }

    public func capture(
        _ request: IdempotentRequest, holdID: String, amountTokens: Int64?, logger: Logger
    ) async throws
        -> IdempotentResult<HoldState>
    {
        try await run(request, lane: try await holdLane(holdID, logger: logger), logger: logger) {
            try await ledger.capture($0, holdID: holdID, amountTokens: amountTokens, idempotencyKey: request.key)
        }
    }

    public func void(_ request: IdempotentRequest, holdID: String, logger: Logger) async throws -> IdempotentResult<HoldState> {
        try await run(request, lane: try await holdLane(holdID, logger: logger), logger: logger) {
            try await ledger.void($0, holdID: holdID, idempotencyKey: request.key)
        }
    }

    /// An operator's debit: idempotent per key, audited in its transaction, never below zero.
    public func debit(
        _ request: IdempotentRequest, userID: String, amountTokens: Int64, bucket: Bucket?, note: String, actor: String, ip: String?, logger: Logger
    ) async throws -> IdempotentResult<LedgerResult> {
        try Self.check(note: note)
        return try await run(request, lane: Ledger.lane(userID: userID), logger: logger) { tx in
            guard try await users.isActiveUser(userID, tx) else { throw LedgerError.userNotFound(userID) }
            let result = try await ledger.debit(
                tx, userID: userID, amountTokens: amountTokens, bucket: bucket, note: note, idempotencyKey: request.key)
            try await audit.record(
                tx, at: clock.now(), actor: actor, action: "admin_token_debit", subject: userID, ip: ip,
                detail: "\(amountTokens) \(bucket?.rawValue ?? "any"): \(note)")
            return result
        }
    }

    /// An operator's reversal of the operation a transfer belongs to: once (a second one is `alreadyReversed`), audited;
    /// never for an erased account (`userNotFound`).
    /// `ofUser`: the transfer must belong to this user (a page about one user never reverses another's entry); checked
    /// in the same transaction, so nothing is reversed when it does not.
    public func reverse(
        transferID: String, ofUser expected: String? = nil, note: String, actor: String, ip: String?, logger: Logger
    ) async throws -> Reversal {
        try Self.check(note: note)
        guard transferID.utf8.count <= 64 else { throw LedgerError.transferNotFound }
        return try await database.transaction(logger: logger) { tx in
            // An erased account is never credited: asked (share-locked) before the ledger's locks, as every write asks.
            if let owner = try await ledger.transferOwner(tx, transferID: transferID), expected == nil || expected == owner {
                guard try await users.isActiveUser(owner, tx) else { throw LedgerError.userNotFound(owner) }
            }
            let reversal = try await ledger.reverse(tx, transferID: transferID, ofUser: expected, note: note, idempotencyKey: nil)
            try await audit.record(
                tx, at: clock.now(), actor: actor, action: "admin_transfer_reversed", subject: reversal.userID, ip: ip,
                detail: "\(reversal.reversedOperationID) \(reversal.reversedReason) \(reversal.amountTokens): \(note)")
            return reversal
        }
    }

    public func pendingHolds(userID: String, logger: Logger) async throws -> [HoldState] {
        try await database.transaction(logger: logger) { tx in
            guard try await users.isActiveUser(userID, tx) else { throw LedgerError.userNotFound(userID) }
            return try await ledger.pendingHolds(tx, userID: userID)
        }
    }

    /// An operator's reason: 1 to 500 bytes.
    static func check(note: String) throws {
        guard !note.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty, note.utf8.count <= 500 else {
            throw LedgerError.invalid("Field 'reason' must be 1 to 500 bytes of text.")
        }
    }

    public func history(userID: String, limit: Int, cursor: Int64?, logger: Logger) async throws -> (entries: [HistoryEntry], nextCursor: Int64?) {
        try await database.withConnection(logger: logger) { try await ledger.history($0, userID: userID, limit: limit, cursor: cursor) }
    }

    public func verify(logger: Logger) async throws -> VerifyReport {
        try await database.withConnection(logger: logger) { try await ledger.verify($0) }
    }

    /// What users hold, by bucket (every user account read: run it with `verify`, not on every page).
    public func userBucketTotals(logger: Logger) async throws -> [(bucket: String, balance: Int64)] {
        try await database.withConnection(logger: logger) { tx in
            try await tx.query(
                "SELECT bucket, SUM(balance) AS total FROM ledger_accounts WHERE user_id IS NOT NULL GROUP BY bucket ORDER BY bucket", []
            ).map { (try $0.string("bucket"), try $0.int("total")) }
        }
    }

    /// One subscription period as the ledger ran it: the plan's tokens granted and the rollover cap's excess expired.
    public struct PeriodRun: Sendable, Decodable {
        public let userId: String
        public let periodKey: String
        public let planId: String
        public let granted: Int64
        public let expired: Int64
        public let createdAt: Date
    }

    /// The newest period runs (by the `created_at_ms` index), and the sums of those since `since`.
    public func periodRuns(limit: Int, since: Date, logger: Logger) async throws -> (runs: [PeriodRun], count: Int64, granted: Int64, expired: Int64)
    {
        try await database.withConnection(logger: logger) { tx in
            let runs = try await tx.query(
                "SELECT user_id, period_key, plan_id, granted, expired, created_at_ms FROM ledger_period_grants ORDER BY created_at_ms DESC LIMIT ?",
                [min(max(limit, 1), 200)], as: PeriodRun.self)
            let sums = try await tx.first(
                """
                SELECT COUNT(*) AS runs, COALESCE(SUM(granted), 0) AS granted, COALESCE(SUM(expired), 0) AS expired
                FROM ledger_period_grants WHERE created_at_ms >= ?
                """, [since])
            return (runs, try sums?.int("runs") ?? 0, try sums?.int("granted") ?? 0, try sums?.int("expired") ?? 0)
        }
    }

    public func pendingHoldCount(logger: Logger) async throws -> Int64 {
        try await database.withConnection(logger: logger) { try await ledger.pendingHoldCount($0) }
    }

    /// Only an empty balance can mean "no such user": the check runs then (off the fast path), so an unknown or erased
    /// id is `userNotFound` rather than a remembered `insufficientTokens`.
    func knownUser<T>(_ userID: String, _ tx: any SQLExecutor, _ operation: () async throws -> T) async throws -> T {
        do {
            return try await operation()
        } catch LedgerError.insufficientTokens(availableTokens: 0) {
            // After the ledger's locks, and nothing is posted: a plain read decides only the answer.
            guard try await users.isActiveUser(userID, tx, lock: false) else { throw LedgerError.userNotFound(userID) }
            throw LedgerError.insufficientTokens(availableTokens: 0)
        }
    }

    /// The lane of a hold's user (read without a lock, before the operation's transaction).
    func holdLane(_ holdID: String, logger: Logger) async throws -> String {
        try await database.withConnection(logger: logger) { try await ledger.lane(holdID: holdID, $0) }
    }

    func run<T: Codable & Sendable>(
        _ request: IdempotentRequest, lane: String, logger: Logger,
        _ operation: @escaping @Sendable (any SQLExecutor) async throws -> T
    ) async throws -> IdempotentResult<T> {
        try await idempotency.run(database, caller: request.caller, key: request.key, request: request.fields, lane: lane, logger: logger, operation)
    }
}
