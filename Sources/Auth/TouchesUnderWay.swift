import Logging
import Storage
import Synchronization

/// The "last used" writes under way in this process (a session's idle expiry, an API key's last use), by row id: a
/// row's parallel requests, all seeing it due, write it once. Before, each wrote its own: about 1.8 touches per session
/// in a first round of reads over a million seeded sessions (docs/performance.md), the repeats queueing on the first
/// one's row lock; and once a minute every spend in flight on one API key. The writing statement also skips a row
/// written since it was read (another node's touch).
final class TouchesUnderWay: Sendable {
    private let running = Mutex(Set<String>())
    /// What is touched ("session", "API key"), for the log.
    let kind: String

    init(kind: String) { self.kind = kind }

    /// Runs `write` unless another request of this process is writing the same row's touch now (then returns at once).
    /// A touch is bookkeeping: when it fails (a lease timeout, a cancelled request), the request goes on and the failure
    /// is logged; the row is due again on its next use.
    func once(_ id: String, logger: Logger, _ write: () async throws -> Void) async {
        guard running.withLock({ $0.insert(id).inserted }) else { return }
        defer { _ = running.withLock { $0.remove(id) } }
        do {
            try await write()
        } catch is CancellationError {
            // The request went away; the row is due again on its next use.
        } catch {
            logger.warning(
                "a last-use touch was not written; the request goes on", metadata: ["touched": "\(kind)", "error": .error(error)])
        }
    }
}
