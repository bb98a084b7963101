import Clock
import Foundation
import Logging
import Storage

/// The owner of API keys, asked by the ledger's spend (Auth; filled at wiring). On PostgreSQL its query runs inside the
/// spend's own statement, so a spend by a live key costs one round trip.
public protocol LedgerCallerKeys: Sendable {
    /// PostgreSQL SQL returning at most one row — `caller` (TEXT), `caller_id` (TEXT), `caller_seen_at_ms` (BIGINT,
    /// nullable) — for the live key behind `secret` that may spend; nil when `secret` cannot be a key.
    func callerQuery(secret: String, now: Date) -> (sql: String, binds: [String])?
    /// Records a use of the key that ``callerQuery(secret:now:)`` found (its previous use: `lastUsedAt`). Bookkeeping:
    /// it never fails the spend, which has committed by then.
    func keyUsed(id: String, lastUsedAt: Date?, logger: Logger) async
}

/// Who asks for a spend: the credential presented (checked inside the spend's statement where the engine allows) and
/// the ordinary check, which runs otherwise, answers the caller's idempotency key space, and throws the caller's
/// authentication errors.
public struct LedgerCaller: Sendable {
    public let presentedKey: String?
    public let authenticate: @Sendable () async throws -> String

    public init(presentedKey: String?, authenticate: @escaping @Sendable () async throws -> String) {
        self.presentedKey = presentedKey
        self.authenticate = authenticate
    }
}

extension LedgerService {
    /// A service's spend, the one entry point on every engine: idempotent per (caller, `key`), `fields` being the
    /// request's canonical fields a replay must match. On PostgreSQL a presented key is checked, the key looked up, the
    /// tokens allocated and moved, the event and the answer stored in one statement (``Ledger/spendInOneStatement``);
    /// every case it declines without writing (an unknown key, too few tokens, holds or lots to settle, a raced key, a
    /// new account) and every other engine takes the transactional path, after `caller.authenticate`.
    public func spend(
        _ caller: LedgerCaller, key: String, fields: [String: String], userID: String, amountTokens: Int64, reason: String, metadata: String?,
        logger: Logger
    ) async throws -> IdempotentResult<LedgerResult> {
        if let answer = try await spendInOneStatement(
            caller, key: key, fields: fields, userID: userID, amountTokens: amountTokens, reason: reason, metadata: metadata, logger: logger)
        {
            return answer
        }
        let request = IdempotentRequest(caller: try await caller.authenticate(), key: key, fields: fields)
        return try await run(request, lane: Ledger.lane(userID: userID), logger: logger) { tx in
            try await knownUser(userID, tx) {
                try await ledger.spend(tx, userID: userID, amountTokens: amountTokens, reason: reason, metadata: metadata, idempotencyKey: key)
            }
        }
    }

    /// The one-statement spend (PostgreSQL, a presented key the caller keys can query); nil → the transactional path.
    func spendInOneStatement(
        _ caller: LedgerCaller, key: String, fields: [String: String], userID: String, amountTokens: Int64, reason: String, metadata: String?,
        logger: Logger
    ) async throws -> IdempotentResult<LedgerResult>? {
        guard oneStatementSpends, database.engine == .postgres, let callerKeys, let secret = caller.presentedKey,
            let query = callerKeys.callerQuery(secret: secret, now: clock.now())
        else { return nil }
        let requestJSON = try IdempotencyStore.requestJSON(fields)
        let statement: OneStatementAnswer
        do {
            // The user's lane, for this credential: the key is checked inside the statement, so requests presenting
            // other (perhaps made-up) keys must not wait in, or fill, the lane of the user's real callers.
            statement = try await RowLanes.shared.run(Ledger.lane(userID: userID) + "|" + String(secret.hashValue, radix: 36)) {
                try await database.withConnection(logger: logger) { connection in
                    try await ledger.spendInOneStatement(
                        connection, caller: .query(sql: query.sql, binds: query.binds), key: key, requestJSON: requestJSON, userID: userID,
                        amountTokens: amountTokens, reason: reason, metadata: metadata)
                }
            }
        } catch StorageError.uniqueViolation {
            return nil  // the same key raced in from another request: the transactional path replays it
        }
        guard statement.callerFound else { return nil }
        if let id = statement.callerID { await callerKeys.keyUsed(id: id, lastUsedAt: statement.callerSeenAt, logger: logger) }
        return try IdempotencyStore.answer(statement.outcome, request: fields)
    }
}
