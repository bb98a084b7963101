import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Where media files live. Keys are content addresses (`sha256hex.ext`), so a file never changes once written and
/// can be cached forever. An S3-compatible store implements the same calls (PUT, GET, HEAD for the age, DELETE) with async-http-client and signs with SigV4; `MEDIA_BASE_URL` then points at its CDN.
public protocol BlobStore: Sendable {
    /// Stores `data` under its content address within `namespace` (``key(for:fileExtension:namespace:)``) and returns the
    /// key; storing the same bytes again only renews the file's modification time (which
    /// ``delete(_:unlessWrittenWithin:)`` respects).
    func put(_ data: Data, fileExtension: String, namespace: String?) async throws -> String
    /// The file's bytes, or nil when there is none.
    func get(_ key: String) async throws -> Data?
    /// Removes a file nothing uses any more, unless it was written or stored again within `grace`: true when it is
    /// gone (already gone included), false when it was kept for that reason.
    func delete(_ key: String, unlessWrittenWithin grace: TimeInterval) async throws -> Bool
    /// Puts back a file a removal set aside and did not finish with (the file is referenced again).
    func restore(_ key: String) async throws
}

extension BlobStore {
    /// The SHA-256 of the bytes, or with a namespace (the uploader) of the namespace, a zero byte and the bytes: the same
    /// image uploaded by two accounts is two files. Shared across accounts, a file's existence answered whether anybody
    /// else had uploaded those bytes (an outside tester: upload, delete, then ask for the file).
    public static func key(for data: Data, fileExtension: String, namespace: String? = nil) -> String {
        var hasher = SHA256()
        if let namespace { hasher.update(data: Data(namespace.utf8) + [0]) }
        hasher.update(data: data)
        return hasher.finalize().map { String(format: "%02x", $0) }.joined() + "." + fileExtension
    }

    public func put(_ data: Data, fileExtension: String) async throws -> String {
        try await put(data, fileExtension: fileExtension, namespace: nil)
    }

    /// A key as this store writes it: 64 lower-case hex digits, a dot, a short extension.
    public static func isValidKey(_ key: String) -> Bool {
        let parts = key.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].count == 64, (1...5).contains(parts[1].count) else { return false }
        return parts[0].allSatisfy { $0.isHexDigit && !$0.isUppercase } && parts[1].allSatisfy { $0.isLetter && $0.isLowercase }
    }
}

/// The default store: files under a directory (`DATA_DIR/media`), two levels of fan-out, written atomically.
public struct FileBlobStore: BlobStore {
    public let directory: URL

    public init(directory: URL) throws {
        self.directory = directory
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    func url(_ key: String) -> URL {
        directory.appendingPathComponent(String(key.prefix(2)), isDirectory: true).appendingPathComponent(key)
    }

    public func put(_ data: Data, fileExtension: String, namespace: String?) async throws -> String {
        let key = Self.key(for: data, fileExtension: fileExtension, namespace: namespace)
        let target = url(key)
        // Stored already: its modification time becomes now, so a removal under way puts it back (``delete(_:unlessWrittenWithin:)``).
        // A file whose time cannot be set (not ours to change) is kept as it is, as before.
        if utimes(target.path, nil) == 0 || (errno != ENOENT && FileManager.default.fileExists(atPath: target.path)) { return key }
        try FileManager.default.createDirectory(at: target.deletingLastPathComponent(), withIntermediateDirectories: true)
        try data.write(to: target, options: .atomic)
        return key
    }

    /// The file is first renamed aside, so a `put` of the same bytes from then on writes a fresh copy; then its age is
    /// read, and one written within `grace` (a `put` that came first) is put back. A file left aside by a process that
    /// stopped half-way is taken up by the next removal of its key.
    public func delete(_ key: String, unlessWrittenWithin grace: TimeInterval) async throws -> Bool {
        guard Self.isValidKey(key) else { return true }
        let target = url(key).path
        let aside = target + ".removing"
        if rename(target, aside) != 0 {
            let error = errno
            guard error == ENOENT else { throw POSIXError(POSIXErrorCode(rawValue: error) ?? .EIO) }
            guard FileManager.default.fileExists(atPath: aside) else { return true }
        }
        let written = (try? FileManager.default.attributesOfItem(atPath: aside)[.modificationDate]) as? Date ?? .distantPast
        if Date().timeIntervalSince(written) < grace {
            // A copy written meanwhile holds the same bytes: the rename replaces it.
            guard rename(aside, target) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            return false
        }
        guard unlink(aside) == 0 || errno == ENOENT else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        return true
    }

    public func restore(_ key: String) async throws {
        guard Self.isValidKey(key) else { return }
        let target = url(key).path
        // A copy written meanwhile holds the same bytes: the rename replaces it.
        guard rename(target + ".removing", target) == 0 || errno == ENOENT else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    }

    public func get(_ key: String) async throws -> Data? {
        guard Self.isValidKey(key) else { return nil }
        return FileManager.default.contents(atPath: url(key).path)
    }
}

extension FileBlobStore {
    /// Copies every file under `source` (a `DATA_DIR/media` layout) that `target` lacks; returns how many and their
    /// bytes. Files are content-addressed and never change, so a copy is complete once present: backups of media are
    /// incremental by construction. Names that are not keys are skipped; each copy lands under its name by a rename.
    public static func mirror(from source: URL, to target: URL) throws -> (files: Int, bytes: Int) {
        let manager = FileManager.default
        try manager.createDirectory(at: target, withIntermediateDirectories: true)
        guard manager.fileExists(atPath: source.path) else { return (0, 0) }
        var files = 0
        var bytes = 0
        for fanOut in try manager.contentsOfDirectory(atPath: source.path).sorted() where fanOut.count == 2 {
            let from = source.appendingPathComponent(fanOut, isDirectory: true)
            let names = (try? manager.contentsOfDirectory(atPath: from.path)) ?? []
            for name in names.sorted() where isValidKey(name) && name.hasPrefix(fanOut) {
                let destination = target.appendingPathComponent(fanOut, isDirectory: true).appendingPathComponent(name)
                guard !manager.fileExists(atPath: destination.path) else { continue }
                // A file removed since the listing (an unused upload cleaned up) is simply not copied.
                guard let data = manager.contents(atPath: from.appendingPathComponent(name).path) else { continue }
                try manager.createDirectory(at: destination.deletingLastPathComponent(), withIntermediateDirectories: true)
                try data.write(to: destination, options: .atomic)
                files += 1
                bytes += data.count
            }
        }
        return (files, bytes)
    }
}
