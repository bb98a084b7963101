import Clock
import Events
import Foundation
import Storage

/// What a reversal did.
public struct Reversal: Sendable, Equatable {
    /// The reversed operation, its reason and the reversal's own operation id.
    public let reversedOperationID: String
    public let reversedReason: String
    public let operationID: String
    public let userID: String
    /// Tokens given back to the user (a reversed spend) or taken back (a reversed grant, negative).
    public let amountTokens: Int64
    public let balances: BucketBalances
}

/// Operator corrections: debits (never below zero; into the clawback account, reason `admin_debit`) and reversals (a compensating operation, at most once per operation).
/// Each emits its event; the caller (``LedgerService``) makes them idempotent and audits them.
extension Ledger {

    /// Takes `amountTokens` from one bucket (bonus from the latest-expiring lots first), or from `nil` = every bucket in
    /// spend order. More than there is → `insufficientTokens` (nothing written).
    public func debit(
        _ tx: any SQLExecutor, userID: String, amountTokens: Int64, bucket: Bucket?, note: String, idempotencyKey: String?
    ) async throws -> LedgerResult {
        try Self.check(amountTokens: amountTokens, reason: "admin_debit", metadata: nil)
        let now = clock.now()
        var state = try await prepare(tx, userID: userID, now: now)
        let operation = Self.newID()
        let metadata = EventValue.object(["note": .string(note)]).json
        if let bucket {
            guard state.balances[bucket] >= amountTokens else { throw LedgerError.insufficientTokens(availableTokens: state.balances[bucket]) }
            if bucket == .bonus { try await takeFromLots(tx, userID: userID, amountTokens: amountTokens) }
            try await post(
                tx, &state, from: Self.accountID(userID, bucket), to: Self.clawback, amount: amountTokens, reason: "admin_debit",
                userDelta: (bucket, -amountTokens), operation: operation, metadata: metadata, now: now)
        } else {
            for part in try await allocate(tx, state: state, userID: userID, amountTokens: amountTokens, now: now) {
                try await post(
                    tx, &state, from: Self.accountID(userID, part.bucket), to: Self.clawback, amount: part.amount, reason: "admin_debit",
                    userDelta: (part.bucket, -part.amount), operation: operation, metadata: metadata, now: now)
                if let lot = part.lotID { try await tx.query("UPDATE ledger_lots SET remaining = remaining - ? WHERE id = ?", [part.amount, lot]) }
            }
        }
        try await emit(
            tx, .tokensDebited, state, change: -amountTokens, now: now,
            [
                "operationId": .string(operation), "amount": .int(amountTokens), "bucket": .optional(bucket?.rawValue), "note": .string(note),
                "idempotencyKey": .optional(idempotencyKey),
            ])
        return LedgerResult(operationId: operation, userId: userID, amount: amountTokens, balances: state.balances)
    }

    /// The user a transfer (a history entry id) belongs to; nil when there is no such transfer.
    public func transferOwner(_ tx: any SQLExecutor, transferID: String) async throws -> String? {
        try await tx.first("SELECT user_id FROM ledger_transfers WHERE id = ?", [transferID])?.optionalString("user_id")
    }

    /// Reverses the operation that the transfer (a history entry id) belongs to, once: a spend's tokens go back to the
    /// buckets they came from (bonus tokens as a lot without expiry), a grant's are taken back (never below zero:
    /// `insufficientTokens` when they were spent). Holds, expiries, erasures and corrections are refused
    /// (`notReversible`, saying what to do instead).
    /// `ofUser`: the transfer must be this user's (else `transferNotFound`, before anything else is looked at).
    public func reverse(
        _ tx: any SQLExecutor, transferID: String, ofUser expected: String? = nil, note: String, idempotencyKey: String?
    ) async throws -> Reversal {
        guard let transfer = try await tx.first("SELECT operation_id, user_id FROM ledger_transfers WHERE id = ?", [transferID]) else {
            throw LedgerError.transferNotFound
        }
        let operationID = try transfer.string("operation_id")
        let userID = try transfer.string("user_id")
        if let expected, userID != expected { throw LedgerError.transferNotFound }
        let now = clock.now()
        var state = try await prepare(tx, userID: userID, now: now)
        if let earlier = try await tx.first("SELECT reversal_operation_id FROM ledger_reversals WHERE operation_id = ?", [operationID]) {
            throw LedgerError.alreadyReversed(reversalOperationID: try earlier.string("reversal_operation_id"))
        }
        let parts = try await tx.query(
            "SELECT reason, user_amount, user_bucket, debit_account_id, credit_account_id FROM ledger_transfers WHERE operation_id = ? AND user_id = ?",
            [operationID, userID])
        let reason = try parts.first?.string("reason") ?? ""
        let reversible = parts.allSatisfy { row in
            let debit = (try? row.string("debit_account_id")) ?? ""
            let credit = (try? row.string("credit_account_id")) ?? ""
            return (credit == Self.consumption && debit.hasPrefix("user:")) || (debit == Self.issuance && credit.hasPrefix("user:"))
        }
        let bonusGrant = parts.contains { (try? $0.string("user_bucket")) == Bucket.bonus.rawValue && ((try? $0.int("user_amount")) ?? 0) > 0 }
        guard !bonusGrant else {
            throw LedgerError.notReversible(
                "A bonus grant is not reversed (its tokens may have expired or been spent from other lots); debit the bonus bucket instead.")
        }
        guard reversible, !parts.isEmpty else {
            throw LedgerError.notReversible(
                "Only spends and grants can be reversed (this operation is '\(reason)'); void a pending hold, or grant or debit the difference.")
        }
        let reversal = Self.newID()
        var moved: Int64 = 0
        for part in parts {
            guard let bucket = Bucket(rawValue: try part.string("user_bucket")) else { continue }
            let amount = try part.int("user_amount")
            if amount < 0 {
                try await post(
                    tx, &state, from: Self.consumption, to: Self.accountID(userID, bucket), amount: -amount, reason: "reversal",
                    userDelta: (bucket, -amount), operation: reversal, metadata: nil, now: now)
                if bucket == .bonus {
                    try await tx.query(
                        "INSERT INTO ledger_lots (id, user_id, granted, remaining, expires_at_ms, created_at_ms) VALUES (?, ?, ?, ?, NULL, ?)",
                        [Self.newID(), userID, -amount, -amount, now])
                }
            } else {
                guard state.balances[bucket] >= amount else { throw LedgerError.insufficientTokens(availableTokens: state.balances[bucket]) }
                if bucket == .bonus { try await takeFromLots(tx, userID: userID, amountTokens: amount) }
                try await post(
                    tx, &state, from: Self.accountID(userID, bucket), to: Self.issuance, amount: amount, reason: "reversal",
                    userDelta: (bucket, -amount), operation: reversal, metadata: nil, now: now)
            }
            moved -= amount
        }
        try await tx.query(
            "INSERT INTO ledger_reversals (operation_id, reversal_operation_id, user_id, reason, created_at_ms) VALUES (?, ?, ?, ?, ?)",
            [operationID, reversal, userID, note, now])
        try await emit(
            tx, .transferReversed, state, change: moved, now: now,
            [
                "operationId": .string(reversal), "reversedOperationId": .string(operationID), "reversedReason": .string(reason),
                "amount": .int(moved), "note": .string(note), "idempotencyKey": .optional(idempotencyKey),
            ])
        return Reversal(
            reversedOperationID: operationID, reversedReason: reason, operationID: reversal, userID: userID, amountTokens: moved,
            balances: state.balances)
    }

    /// The user's pending holds that still hold tokens (expired ones are settled first), soonest expiry first.
    public func pendingHolds(_ tx: any SQLExecutor, userID: String) async throws -> [HoldState] {
        _ = try await prepare(tx, userID: userID, now: clock.now())
        return try await tx.query(
            "SELECT * FROM ledger_holds WHERE user_id = ? AND status = 'pending' ORDER BY expires_at_ms, id LIMIT 1000", [userID]
        ).map(HoldState.init)
    }
}
