import Webhooks

extension WebhookError {
    var problem: Problem {
        switch self {
        case .invalid(let detail): Problem.validation(detail)
        case .notFound: Problem.notFound("No such webhook endpoint or delivery.")
        }
    }
}
