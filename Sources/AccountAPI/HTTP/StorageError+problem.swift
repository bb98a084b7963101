import Hummingbird
import Logging
import Storage

extension StorageError {
    /// NUL in text is the sender's mistake (400); a unique value claimed by a parallel request first is 409; too many requests waiting for one account's rows are 429; an unreachable database is an outage (503); anything else is a bug,
    /// logged and answered 500 without internals.
    func problem(logger: Logger) -> Problem {
        switch self {
        case .nulCharacter: return Problem.validation("Text fields must not contain NUL (U+0000) characters.")
        case .busy:
            return Problem(
                .tooManyRequests, code: "rate_limited", detail: "Too many requests for the same account or address are in progress; retry shortly."
            )
            .retryAfter(seconds: 1)
        case .locked:
            logger.warning("database rows locked longer than DATABASE_LOCK_TIMEOUT_SECONDS")
            return Problem.unavailable("The data this request needs is locked by another operation; try again shortly.", retryAfterSeconds: 1)
        case .uniqueViolation(let constraint):
            // A parallel request claimed the same unique thing first (where a flow does not answer the race itself).
            logger.error(
                "unique violation reached the HTTP layer (a flow that should answer its own race: a bug to look at)",
                metadata: ["constraint": "\(constraint)"])
            return Problem(
                .conflict, code: "already_exists", detail: "Another request claimed the same thing at the same moment; try again.")
        case .unavailable(let why):
            logger.warning("database unavailable", metadata: ["reason": "\(why)"])
            return Problem.unavailable("The database is unavailable; try again shortly.")
        default:
            logger.error("storage error", metadata: ["error": "\(self)"])
            return Problem.internalError
        }
    }
}
