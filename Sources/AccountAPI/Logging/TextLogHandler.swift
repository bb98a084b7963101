import Logging

/// `LOG_FORMAT=text`: swift-log's `StreamLogHandler` output on stderr, with metadata rendered only when a line is
/// written. `StreamLogHandler` re-renders its metadata on every change, and postgres-nio tags its logger with the
/// connection on every query, so at the default level most of that work was for lines never written.
struct TextLogHandler: LogHandler {
    private var stream: StreamLogHandler
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    /// Writes to stderr, or to `stream` (tests).
    init(
        label: String, stream output: (any TextOutputStream & Sendable)? = nil,
        metadataProvider: Logger.MetadataProvider? = LoggingSystem.metadataProvider
    ) {
        stream =
            output.map { StreamLogHandler(label: label, stream: $0, metadataProvider: nil) }
            ?? StreamLogHandler.standardError(label: label, metadataProvider: nil)
        self.metadataProvider = metadataProvider
    }

    var logLevel: Logger.Level {
        get { stream.logLevel }
        set { stream.logLevel = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// The same precedence as `StreamLogHandler`: the handler's metadata, then the provider's, then the call's.
    func log(event: LogEvent) {
        var event = event
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { $1 } }
        if let explicit = event.metadata { merged.merge(explicit) { $1 } }
        event.metadata = merged.isEmpty ? nil : merged
        stream.log(event: event)
    }
}
