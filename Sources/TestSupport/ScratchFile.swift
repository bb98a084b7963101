import Clock
import Foundation

/// A file in the temporary directory that is removed when the last reference to it goes: a test keeps it (or a closure
/// that captured it) for as long as it is read, and nothing is left behind in /tmp.
public final class ScratchFile: Sendable {
    public let path: String

    /// Writes `contents` to a new file whose name starts with `prefix` and ends with `suffix`.
    public init(_ contents: String, prefix: String, suffix: String) throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)\(FreshID.uuid())\(suffix)").path
        try contents.write(toFile: path, atomically: true, encoding: .utf8)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}
