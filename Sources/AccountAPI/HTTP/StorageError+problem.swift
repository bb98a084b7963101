import Logging
import Storage

extension StorageError {
    /// NUL in text is the sender's mistake (400); an unreachable database is an outage (503); anything else is a bug,
    /// logged and answered 500 without internals.
    func problem(logger: Logger) -> Problem {
        switch self {
        case .nulCharacter: return Problem.validation("Text fields must not contain NUL (U+0000) characters.")
        case .unavailable(let why):
            logger.warning("database unavailable", metadata: ["reason": "\(why)"])
            return Problem.unavailable("The database is unavailable; try again shortly.")
        default:
            logger.error("storage error", metadata: ["error": "\(self)"])
            return Problem.internalError
        }
    }
}
