import HTTPTypes
import Ledger

extension LedgerError {
    var problem: Problem {
        switch self {
        case .insufficientTokens(let available):
            Problem(
                HTTPResponse.Status(code: 402, reasonPhrase: "Payment Required"), code: "insufficient_tokens",
                detail: "Not enough tokens: \(available) available."
            )
            .with("availableTokens", .int(Int(available)))
        case .holdNotFound: Problem.notFound("No such hold.")
        case .holdResolved(let hold):
            Problem(.conflict, code: "hold_resolved", detail: "The hold is already \(hold.status); a hold resolves once.")
                .with("holdId", .string(hold.id)).with("holdStatus", .string(hold.status))
                .with("capturedAmount", .int(Int(hold.capturedAmount ?? 0))).with("amount", .int(Int(hold.amount)))
        case .invalid(let detail): Problem.validation(detail)
        case .userNotFound(let id): Problem.notFound("No user with id \(id).")
        case .idempotencyConflict(let differing):
            Problem(
                .conflict, code: "idempotency_conflict",
                detail: "This Idempotency-Key was used with a different request (\(differing.joined(separator: ", ")) differ)."
            )
            .with("fields", .strings(differing))
        case .transferNotFound: Problem.notFound("No transfer with this id (use an id from the user's token history).")
        case .alreadyReversed(let reversal):
            Problem(.conflict, code: "already_reversed", detail: "This operation was reversed before (by operation \(reversal)); it reverses once.")
                .with("reversalOperationId", .string(reversal))
        case .notReversible(let detail): Problem(.conflict, code: "not_reversible", detail: detail)
        case .allowanceExceeded(let allowance, let remaining):
            Problem(
                .forbidden, code: "allowance_exceeded",
                detail: "This profile's monthly allowance is \(allowance) tokens; \(remaining) remain this period. The account owner can raise it."
            )
            .with("allowance", .int(Int(allowance))).with("remainingTokens", .int(Int(remaining)))
        case .holdAwaitingApproval:
            Problem(
                .conflict, code: "hold_awaiting_approval",
                detail:
                    "This hold belongs to a purchase request the account's owner has not answered; purchase_request.resolved says when it may be captured."
            )
        }
    }
}
