import Foundation
import Logging

/// Writes one JSON object per line to stdout: time, level, label, message and metadata
/// (including `hb.request.id`). Used when `LOG_FORMAT=json`.
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    // swift-log ≥ 1.6 calls this entry point.
    func log(event: LogEvent) {
        log(
            level: event.level, message: event.message, metadata: event.metadata, source: event.source, file: event.file, function: event.function,
            line: event.line)
    }

    func log(
        level: Logger.Level, message: Logger.Message, metadata explicit: Logger.Metadata?, source: String, file: String, function: String, line: UInt
    ) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { $1 } }
        if let explicit { merged.merge(explicit) { $1 } }
        var object: [String: Any] = [
            "ts": ISO8601DateFormatter.string(from: Date(), timeZone: .gmt, formatOptions: [.withInternetDateTime, .withFractionalSeconds]),
            "level": level.rawValue, "label": label, "msg": message.description,
        ]
        for (key, value) in merged { object[key] = Self.plain(value) }
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else { return }
        var line = data
        line.append(0x0A)
        FileHandle.standardOutput.write(line)
    }

    static func plain(_ value: Logger.MetadataValue) -> Any {
        switch value {
        case .string(let s): s
        case .stringConvertible(let s): s.description
        case .array(let a): a.map(plain)
        case .dictionary(let d): d.mapValues(plain)
        }
    }
}
