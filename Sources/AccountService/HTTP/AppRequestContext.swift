import Hummingbird
import Logging
import NIOCore

/// Per-request state: the core context plus the caller's address (for rate limits and audit).
struct AppRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    /// The peer's IP address as text, or "unknown" (router tests have no socket).
    let remoteIP: String

    init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.remoteIP = source.channel.remoteAddress?.ipAddress ?? "unknown"
    }

    /// Bodies are limited to 1 MiB; larger ones get a 413 problem.
    var maxUploadSize: Int { 1 << 20 }
}
