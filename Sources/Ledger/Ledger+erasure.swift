import Clock
import Foundation
import Storage

extension Ledger {
    /// An erased account keeps its history but no tokens: pending holds are voided, then every bucket's balance moves to
    /// the expired account (reason `account_erased`), in the caller's transaction. Afterwards a spend or hold finds nothing
    /// to take and, since the user no longer exists, answers 404 like a grant. Returns the tokens forfeited.
    @discardableResult
    public func forfeitAll(_ tx: any SQLExecutor, userID: String) async throws -> Int64 {
        let now = clock.now()
        var state = try await prepare(tx, userID: userID, now: now)
        let pending = try await tx.query("SELECT id FROM ledger_holds WHERE user_id = ? AND status = 'pending'", [userID])
        for hold in pending {
            try await releaseAll(tx, &state, holdID: try hold.string("id"), status: "voided", reason: "account_erased", now: now)
        }
        var forfeited: Int64 = 0
        let operation = Self.newID()
        for bucket in Bucket.allCases where state.balances[bucket] > 0 {
            let amount = state.balances[bucket]
            try await post(
                tx, &state, from: Self.accountID(userID, bucket), to: Self.expired, amount: amount, reason: "account_erased",
                userDelta: (bucket, -amount), operation: operation, metadata: nil, now: now)
            forfeited += amount
        }
        try await tx.query("UPDATE ledger_lots SET remaining = 0 WHERE user_id = ? AND remaining > 0", [userID])
        return forfeited
    }
}
