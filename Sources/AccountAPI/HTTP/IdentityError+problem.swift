import HTTPTypes
import Identity

extension IdentityError {
    var problem: Problem {
        switch self {
        case .invalid(let detail): Problem(.unauthorized, code: "invalid_identity_token", detail: detail)
        case .unavailable(let detail): Problem.unavailable(detail)
        }
    }
}
