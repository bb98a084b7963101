import Clock
import Foundation
import Logging

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
    /// commits later, compacted. It is written under a name of its own (`target.partial-RANDOM`), synced, then linked to
    /// `target`, which fails if `target` exists by then (two backups to one name: one wins, the other reports it), so
    /// a crash, a full disk or a race never leaves a half copy under the final name; a failed copy is removed. Runs on
    /// its own thread (the event loops never wait on the disk); cancelling the task interrupts it. The source is held
    /// shared (``SQLiteFileLock``) meanwhile, so `restore` does not swap it during the copy.
    public static func snapshot(of path: String, to target: String) async throws -> Snapshot {
        let source = absolute(path)
        let target = absolute(target)
        guard FileManager.default.fileExists(atPath: source) else { throw BackupError("no database at \(path)") }
        guard !FileManager.default.fileExists(atPath: target) else { throw BackupError("\(target) exists already; backups never overwrite") }
        guard let lock = SQLiteFileLock(path: source, exclusive: false) else { throw BackupError("\(path) is being restored") }
        defer { lock.release() }
        let partial = "\(target).partial-\(FreshID.hex().prefix(8))"
        let started = ContinuousClock.now
        do {
            try await onOwnThread("sqlite-backup") { connection in
                _ = try connection.query("PRAGMA busy_timeout = 10000", [])
                _ = try connection.query("VACUUM INTO ?", [.text(partial)])
            } opening: {
                try SQLiteConnection(path: source)
            }
            let handle = try FileHandle(forUpdating: URL(fileURLWithPath: partial))
            try handle.synchronize()
            try handle.close()
            guard link(partial, target) == 0 else {
                let reason =
                    errno == EEXIST ? "\(target) was written meanwhile (by another backup); this copy is discarded" : String(cString: strerror(errno))
                throw BackupError("could not finish \(target): \(reason)")
            }
            unlink(partial)
        } catch {
            for suffix in ["", "-journal", "-wal", "-shm"] { unlink(partial + suffix) }
            if error is CancellationError || (error as? SQLiteFailure)?.isInterrupt == true { throw CancellationError() }
            throw error as? BackupError ?? BackupError("could not write \(target): \(error)")
        }
        let elapsed = started.duration(to: .now)
        return Snapshot(
            path: target, bytes: fileSize(target), seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    }

    /// A path SQLite reads as a file name: relative paths are made absolute, so that one spelled like a URI
    /// (`file:…`) is never taken for one.
    public static func absolute(_ path: String) -> String {
        path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
    }

    /// The size in bytes (64-bit: copies pass 4 GiB).
    public static func fileSize(_ path: String) -> Int {
        var info = stat()
        return stat(path, &info) == 0 ? Int(info.st_size) : 0
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

    /// The copy's schema must be the one this binary's migrations make: every table, index, trigger and view with its
    /// SQL, compared with an empty database migrated here. A copy edited by hand (an append-only trigger or a unique
    /// index dropped, a column changed) is refused even when its books balance. Call it once the copy is migrated.
    public static func checkSchema(_ path: String, migrations: [Migration], logger: Logger) async throws {
        let query = "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
        @Sendable func entries(_ rows: [SQLRow]) throws -> [String: String] {
            Dictionary(try rows.map { ("\(try $0.string("type")) \(try $0.string("name"))", $0.optionalString("sql") ?? "") }) { first, _ in first }
        }
        let reference = try await SQLiteDatabase.open(path: ":memory:", logger: logger)
        _ = try await reference.migrate(migrations, logger: logger)
        let expected = try entries(try await reference.withConnection(logger: logger) { try await $0.query(query) })
        try await reference.close()
        let found: [String: String] = try await onOwnThread("sqlite-backup") {
            let connection = try SQLiteConnection(path: path)
            defer { connection.close() }
            return try entries(try connection.query(query, []))
        }
        var problems = expected.keys.filter { found[$0] == nil }.sorted().map { "\($0) is missing" }
        problems += found.keys.filter { expected[$0] == nil }.sorted().map { "\($0) is not this version's" }
        problems += expected.keys.filter { found[$0] != nil && found[$0] != expected[$0] }.sorted().map { "\($0) differs" }
        guard problems.isEmpty else {
            throw BackupError(
                "\(path) cannot be restored: its schema is not the one the migrations make: " + problems.prefix(5).joined(separator: "; "))
        }
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

    /// Runs `body` on a connection of its own, on a thread of its own; cancelling the task interrupts the statement.
    static func onOwnThread<T: Sendable>(
        _ name: String, _ body: @escaping @Sendable (SQLiteConnection) throws -> T, opening: @escaping @Sendable () throws -> SQLiteConnection
    ) async throws -> T {
        let connection = try opening()
        defer { connection.close() }
        return try await withTaskCancellationHandler {
            try Task.checkCancellation()
            return try await onOwnThread(name) { try body(connection) }
        } onCancel: {
            connection.interrupt()
        }
    }
}

/// A failed backup or restore, worded for the operator.
public struct BackupError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// An advisory `flock` beside a database file (`PATH.lock`, created once, empty). Every process that opens the
/// database holds it shared for as long as it does; `restore` needs it exclusively, so it never swaps a file from under
/// a server or a tool. It is a file of its own: opening and closing the database file itself would drop the POSIX locks
/// SQLite holds on it in this process (closing any descriptor of a file releases them all).
public final class SQLiteFileLock: @unchecked Sendable {
    private var descriptor: Int32

    public init?(path: String, exclusive: Bool) {
        descriptor = open(path + ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        // No directory yet: nobody can have the database open.
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
