import Billing
import Entitlements
import HTTPTypes

extension BillingError {
    var problem: Problem {
        switch self {
        case .notConfigured: Problem.unavailable(detail, retryAfterSeconds: 300)
        case .apple: Problem(.badRequest, code: "invalid_signed_payload", detail: detail)
        case .stripe: Problem(.badRequest, code: "invalid_signature", detail: detail)
        case .malformed, .unknownProduct: Problem.validation(detail)
        case .accountTokenMismatch: Problem(.forbidden, code: "account_mismatch", detail: detail)
        case .boundToAnotherAccount: Problem(.conflict, code: "purchase_bound_elsewhere", detail: detail)
        case .transactionRevoked: Problem(.conflict, code: "transaction_revoked", detail: detail)
        case .offerNotEligible: Problem(.forbidden, code: "offer_not_eligible", detail: detail)
        }
    }
}
