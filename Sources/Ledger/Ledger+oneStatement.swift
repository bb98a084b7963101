import Clock
import Events
import Foundation
import Storage

/// What `Ledger.spendInOneStatement` did.
public enum OneStatementSpend: Sendable, Equatable {
    /// Spent, and the result stored under the key.
    case spent(LedgerResult)
    /// The key was used before by this caller: its record (replay or conflict).
    case stored(IdempotencyRecord)
    /// Nothing written: a case the one-statement path leaves to the transactional one (accounts not created
    /// yet, an expired hold or lapsed lot to settle, too few tokens, invalid input, not PostgreSQL).
    case fallback
}

/// Who is spending, for `Ledger.spendInOneStatement`.
public enum SpendCaller: Sendable {
    /// An already authenticated caller (its idempotency key space).
    case known(String)
    /// A query, run in the same statement, returning at most one row: `caller` (TEXT), `caller_id` (TEXT) and
    /// `caller_seen_at_ms` (BIGINT, nullable). No row: nothing runs (e.g. an unknown or revoked API key).
    case query(sql: String, binds: [String])
}

/// What `Ledger.spendInOneStatement` answered, and for whom.
public struct OneStatementAnswer: Sendable, Equatable {
    public let outcome: OneStatementSpend
    /// False when a `.query` caller found no row (nothing ran).
    public let callerFound: Bool
    /// A `.query` caller's id and last use.
    public let callerID: String?
    public let callerSeenAt: Date?
}

extension Ledger {
    /// A one-shot idempotent spend in a single statement (PostgreSQL's `ledger_spend_once`, migration 0017):
    /// the idempotency lookup, the account locks, the allocation (soonest-expiring first), the transfers and the
    /// stored outcome in one round trip and one implicit transaction. Must run outside a transaction.
    public func spendInOneStatement(
        _ connection: any SQLExecutor, caller: SpendCaller, key: String, requestJSON: String, userID: String, amountTokens: Int64,
        reason: String, metadata: String?
    ) async throws -> OneStatementAnswer {
        let declined = OneStatementAnswer(outcome: .fallback, callerFound: false, callerID: nil, callerSeenAt: nil)
        guard connection.engine == .postgres, (try? Self.check(amountTokens: amountTokens, reason: reason, metadata: metadata)) != nil,
            Self.jsonbAccepts(metadata)
        else {
            return declined
        }
        let operation = Self.newID()
        let callerSQL: String
        let callerBinds: [any SQLBindable]
        switch caller {
        case .known(let name):
            (callerSQL, callerBinds) = ("SELECT ?::TEXT AS caller, NULL::TEXT AS caller_id, NULL::BIGINT AS caller_seen_at_ms", [name])
        case .query(let sql, let binds): (callerSQL, callerBinds) = (sql, binds)
        }
        // The function runs once for the caller's row, and not at all without one. Its `tokens.spent` event is recorded by
        // the same statement (the outbox's INSERT over the `spend_event` row), so it commits exactly when the spend does.
        let outbox = events.insertFromCTE(named: "spend_event").map {
            """
            , spend_event AS (
                SELECT 'tokens.spent'::TEXT AS event_type, ?::TEXT AS user_id, jsonb_build_object(
                    'userId', ?::TEXT, 'operationId', ?::TEXT, 'amount', ?::BIGINT, 'reason', ?::TEXT, 'idempotencyKey', ?::TEXT,
                    'metadata', ?::JSONB, 'balances', jsonb_build_object('bonusTokens', bonus, 'subscriptionTokens', subscription,
                    'purchasedTokens', purchased, 'heldTokens', held, 'totalTokens', bonus + subscription + purchased))::TEXT AS data,
                    bonus + subscription + purchased + ?::BIGINT AS balance_before, bonus + subscription + purchased AS balance_after,
                    ?::BIGINT AS at_ms
                FROM spent WHERE outcome = 'spent'),
            recorded AS (\($0) RETURNING 1)
            """
        }
        let now = clock.now()
        let eventBinds: [any SQLBindable] = outbox == nil ? [] : [userID, userID, operation, amountTokens, reason, key, metadata, amountTokens, now]
        let row = try await connection.first(
            """
            WITH spent AS (
                SELECT c.caller_id, c.caller_seen_at_ms, s.outcome, s.request_json, s.outcome_json, s.status, s.response_json, s.bonus,
                    s.subscription, s.purchased, s.held, s.transfers
                FROM (\(callerSQL)) c CROSS JOIN LATERAL ledger_spend_once(
                    c.caller, ?::TEXT, ?::TEXT, ?::TEXT, ?::BIGINT, ?::TEXT, ?::TEXT, ?::BIGINT, ?::TEXT) s)\(outbox ?? "")
            SELECT * FROM spent
            """,
            callerBinds + [
                key, requestJSON, userID, amountTokens, reason, metadata, now, operation,
            ] + eventBinds)
        guard let row else { return declined }
        // The rows come before the implicit commit: answer only once it is done (a crash or failover in between would
        // otherwise lose an acknowledged spend; scripts/operations-test failover found it).
        try await connection.confirmImplicitCommit()
        return OneStatementAnswer(
            outcome: try Self.outcome(row, operationID: operation, userID: userID, amountTokens: amountTokens, reason: reason), callerFound: true,
            callerID: row.optionalString("caller_id"),
            callerSeenAt: row.optionalDate("caller_seen_at_ms"))
    }

    /// PostgreSQL's `jsonb` refuses the escape `\u0000` that JSON allows (its text cannot hold a NUL). This statement
    /// builds the event's metadata as `jsonb`, so such a spend takes the transactional path, which keeps metadata as text.
    static func jsonbAccepts(_ metadata: String?) -> Bool {
        guard let metadata else { return true }
        return !metadata.contains("\\u0000") && !metadata.utf8.contains(0)
    }

    static func outcome(_ row: SQLRow, operationID: String, userID: String, amountTokens: Int64, reason: String) throws -> OneStatementSpend {
        switch try row.string("outcome") {
        case "spent":
            let transfers = try row.int("transfers")
            for _ in 0..<transfers { LedgerMetrics.transfer(reason: reason) }
            LedgerMetrics.spend(path: "one_statement")
            let balances = BucketBalances(
                bonusTokens: try row.int("bonus"), subscriptionTokens: try row.int("subscription"), purchasedTokens: try row.int("purchased"),
                heldTokens: try row.int("held"))
            return .spent(LedgerResult(operationId: operationID, userId: userID, amount: amountTokens, balances: balances))
        case "stored":
            return .stored(try IdempotencyRecord(row: row))
        default:
            return .fallback
        }
    }
}
