import Events
import Foundation
import Storage

/// The ledger's events (names are the webhook contract).
public enum LedgerEvent: String, Sendable {
    case tokensGranted = "tokens.granted"
    case tokensSpent = "tokens.spent"
    case tokensDebited = "tokens.debited"
    case transferReversed = "transfer.reversed"
    case holdCreated = "hold.created"
    case holdCaptured = "hold.captured"
    case holdVoided = "hold.voided"
    case holdExpired = "hold.expired"
    case refundClawedBack = "refund.clawed_back"
}

extension Ledger {
    /// Records `type` for the user in `state` with `fields`, the user id and the balances after; `change` is how the
    /// spendable total moved (for `balance.low`).
    func emit(_ tx: any SQLExecutor, _ type: LedgerEvent, _ state: UserState, change: Int64, now: Date, _ fields: [String: EventValue]) async throws {
        var data = fields
        data["userId"] = .string(state.userID)
        data["balances"] = Self.eventBalances(state.balances)
        try await events.emit(
            tx, DomainEvent(type: type.rawValue, userID: state.userID, data: data, balanceBefore: state.total - change, balanceAfter: state.total),
            at: now)
    }

    static func eventBalances(_ balances: BucketBalances) -> EventValue {
        .object([
            "bonusTokens": .int(balances.bonusTokens), "subscriptionTokens": .int(balances.subscriptionTokens),
            "purchasedTokens": .int(balances.purchasedTokens), "heldTokens": .int(balances.heldTokens), "totalTokens": .int(balances.totalTokens),
        ])
    }

    /// A hold's event: its id, amounts and the idempotency key where there is one.
    func emitHold(
        _ tx: any SQLExecutor, _ type: LedgerEvent, _ hold: HoldState, _ state: UserState, change: Int64, key: String?, now: Date
    ) async throws {
        try await emit(
            tx, type, state, change: change, now: now,
            [
                "holdId": .string(hold.id), "amount": .int(hold.amount), "capturedAmount": .int(hold.capturedAmount ?? 0),
                "status": .string(hold.status), "expiresAt": .date(hold.expiresAt), "idempotencyKey": .optional(key),
            ])
    }
}
