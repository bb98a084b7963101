import Foundation

/// Copies of the embedded database taken while it serves, and the checks a copy passes before it replaces anything.
/// The ledger check and the swap are the caller's (`account-service restore`); this file knows only SQLite files.
public enum SQLiteBackup {
    public struct Snapshot: Sendable {
        public let path: String
        public let bytes: Int
        public let seconds: Double
    }

    /// Writes a consistent copy of the database at `path` to `target` while other connections keep writing.
    /// `VACUUM INTO` reads one WAL snapshot: the copy holds every transaction committed before it began and none that
    /// commits later, compacted. It is written to `target.partial`, synced, then renamed, so a crash or a full disk
    /// never leaves a half copy under the final name. Runs on its own thread (the event loops never wait on the disk).
    public static func snapshot(of path: String, to target: String) async throws -> Snapshot {
        guard FileManager.default.fileExists(atPath: path) else { throw BackupError("no database at \(path)") }
        guard !FileManager.default.fileExists(atPath: target) else { throw BackupError("\(target) exists already; backups never overwrite") }
        let partial = target + ".partial"
        try? FileManager.default.removeItem(atPath: partial)
        let started = ContinuousClock.now
        try await onOwnThread("sqlite-backup") {
            let connection = try SQLiteConnection(path: path)
            defer { connection.close() }
            _ = try connection.query("PRAGMA busy_timeout = 10000", [])
            _ = try connection.query("VACUUM INTO ?", [.text(partial)])
        }
        do {
            let handle = try FileHandle(forUpdating: URL(fileURLWithPath: partial))
            try handle.synchronize()
            try handle.close()
            try FileManager.default.moveItem(atPath: partial, toPath: target)
        } catch {
            try? FileManager.default.removeItem(atPath: partial)
            throw BackupError("could not finish \(target): \(error)")
        }
        let bytes = (try? FileManager.default.attributesOfItem(atPath: target)[.size] as? Int) ?? 0
        let elapsed = started.duration(to: .now)
        return Snapshot(path: target, bytes: bytes, seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    }

    /// What a copy must be before it is restored: a SQLite file that passes `PRAGMA integrity_check`, whose applied
    /// migrations this binary knows, each with the checksum this binary has (an edited or newer schema is refused).
    public static func check(_ path: String, migrations: [Migration]) async throws {
        let problems: [String] = try await onOwnThread("sqlite-backup") {
            guard FileManager.default.fileExists(atPath: path) else { return ["no file at \(path)"] }
            let connection = try SQLiteConnection(path: path)
            defer { connection.close() }
            let integrity: [String]
            do {
                integrity = try connection.query("PRAGMA integrity_check", []).compactMap { try? $0.string("integrity_check") }
            } catch {
                return ["not a SQLite database (\(error))"]
            }
            guard integrity == ["ok"] else { return integrity.prefix(5).map { "integrity: \($0)" } }
            let known = Dictionary(migrations.map { ($0.version, $0) }, uniquingKeysWith: { first, _ in first })
            var problems: [String] = []
            let applied = (try? connection.query("SELECT version, file, checksum FROM schema_migrations ORDER BY version", [])) ?? []
            if applied.isEmpty { problems.append("no applied migrations: not an account-service database") }
            for row in applied {
                let version = Int(try row.int("version"))
                let file = try row.string("file")
                guard let migration = known[version] else {
                    problems.append("migration \(file) is unknown to this binary (the backup comes from a newer version)")
                    continue
                }
                if try row.string("checksum") != migration.checksum { problems.append("migration \(file): checksum differs from this binary's") }
            }
            return problems
        }
        guard problems.isEmpty else { throw BackupError("\(path) cannot be restored: " + problems.joined(separator: "; ")) }
    }

    /// Puts `restored` in place of the database at `path` in one rename. The file there before (if any) is kept as
    /// `path.replaced-STAMP` with its WAL folded in; stale `-wal`/`-shm` files never meet the new database.
    /// Refused while any process has the database open (``SQLiteFileLock``).
    public static func replace(_ path: String, with restored: String, stamp: String) throws -> String? {
        guard let lock = SQLiteFileLock(path: path, exclusive: true) else {
            throw BackupError("\(path) is in use (a server or a tool has it open); stop it first")
        }
        defer { lock.release() }
        var kept: String?
        if FileManager.default.fileExists(atPath: path) {
            let connection = try SQLiteConnection(path: path)
            _ = try connection.query("PRAGMA wal_checkpoint(TRUNCATE)", [])
            connection.close()
            kept = "\(path).replaced-\(stamp)"
            try FileManager.default.moveItem(atPath: path, toPath: kept ?? path)
        }
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        try FileManager.default.moveItem(atPath: restored, toPath: path)
        return kept
    }

    static func onOwnThread<T: Sendable>(_ name: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        let thread = SQLiteThread(name: name)
        defer { thread.stop() }
        return try await withTaskExecutorPreference(thread) { try body() }
    }
}

/// A failed backup or restore, worded for the operator.
public struct BackupError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// An advisory `flock` on a database file. Every process that opens the file holds it shared for as long as it does;
/// `restore` needs it exclusively, so it never swaps a file from under a server or a tool. (SQLite's own locks are
/// POSIX record locks, which `flock` does not touch on Linux.)
public final class SQLiteFileLock: @unchecked Sendable {
    private var descriptor: Int32

    public init?(path: String, exclusive: Bool) {
        descriptor = open(path, O_RDONLY | O_CLOEXEC)
        // Nothing there yet: nobody can have it open.
        guard descriptor >= 0 else {
            if errno == ENOENT { return }
            return nil
        }
        guard flock(descriptor, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0 else {
            close(descriptor)
            return nil
        }
    }

    public func release() {
        if descriptor >= 0 { close(descriptor) }
        descriptor = -1
    }

    deinit { release() }
}
