import Clock
import Foundation
import Ledger
import Logging
import Media
import ServiceLifecycle
import Storage
import Synchronization

/// Backups of the embedded default (SQLite): a consistent copy of the database taken while the server writes, the
/// media files beside it, and a restore that checks a copy before it replaces anything. PostgreSQL has its own tools
/// (pg_basebackup, WAL archiving; docs/operations.md), which these commands point at.
public enum Backups {
    public struct Taken: Sendable {
        public let snapshot: SQLiteBackup.Snapshot
        public let mediaFiles: Int
        public let mediaBytes: Int
    }

    public struct Restored: Sendable {
        public let path: String
        /// Where the database that was there before now is (nil when there was none).
        public let kept: String?
        public let migrationsApplied: Int
        public let accountsChecked: Int
        public let transfersChecked: Int
        public let mediaFiles: Int
    }

    static func sqlitePath(_ config: AppConfig) throws -> String {
        guard case .sqlite(let path) = config.database, path != ":memory:" else {
            throw BackupError(
                "backup and restore are for the embedded SQLite database; for PostgreSQL use pg_basebackup with WAL archiving, or pg_dump (docs/operations.md)"
            )
        }
        return path
    }

    static func mediaDirectory(_ config: AppConfig) -> URL {
        URL(fileURLWithPath: config.dataDirectory).appendingPathComponent("media", isDirectory: true)
    }

    /// Copies the database to `file` while it serves, and with `mediaTo` the media files it lacks. Media is copied
    /// before and after the snapshot: every file the snapshot names was present at one of the two passes (a file
    /// removed in between, once nothing used it, is the only one that can be missing, and nothing restored needs it).
    public static func take(_ config: AppConfig, to file: String, mediaTo: String?) async throws -> Taken {
        let path = try sqlitePath(config)
        let media = mediaTo.map { URL(fileURLWithPath: $0, isDirectory: true) }
        var copied = (files: 0, bytes: 0)
        if let media { copied = try FileBlobStore.mirror(from: mediaDirectory(config), to: media) }
        let snapshot = try await SQLiteBackup.snapshot(of: path, to: file)
        if let media {
            let after = try FileBlobStore.mirror(from: mediaDirectory(config), to: media)
            copied = (copied.files + after.files, copied.bytes + after.bytes)
        }
        return Taken(snapshot: snapshot, mediaFiles: copied.files, mediaBytes: copied.bytes)
    }

    /// Puts the backup `file` in place of the configured database. Refused while any process has the database open,
    /// and when a database is there unless `replace` (it is then kept beside, renamed). Before anything is replaced the
    /// copy must pass SQLite's integrity check, carry only migrations this binary has with their checksums, migrate
    /// forward, and balance (`ledger verify`); media files it lacks are copied from `mediaFrom` into `DATA_DIR/media`.
    public static func restore(
        _ config: AppConfig, from file: String, mediaFrom: String?, replace: Bool, clock: any TimeSource, logger: Logger
    ) async throws -> Restored {
        let path = try sqlitePath(config)
        let staging = path + ".restoring"
        guard SQLiteBackup.absolute(file) != SQLiteBackup.absolute(staging) else {
            throw BackupError("\(file) is the file restore works in; copy it elsewhere first")
        }
        if FileManager.default.fileExists(atPath: path) {
            guard replace else {
                throw BackupError("a database exists at \(path); pass --replace to put the backup in its place (the current file is kept beside it)")
            }
            guard let probe = SQLiteFileLock(path: path, exclusive: true) else {
                throw BackupError("\(path) is in use (a server or a tool has it open); stop it first")
            }
            probe.release()
        }
        removeStaging(staging)
        try FileManager.default.createDirectory(
            atPath: URL(fileURLWithPath: path).deletingLastPathComponent().path, withIntermediateDirectories: true)
        do {
            try FileManager.default.copyItem(atPath: file, toPath: staging)
            try await SQLiteBackup.check(staging, migrations: Engine.sqlite.migrations)
            let checked = try await verify(config, staging: staging, logger: logger)
            let media = try mediaFrom.map { try FileBlobStore.mirror(from: URL(fileURLWithPath: $0, isDirectory: true), to: mediaDirectory(config)) }
            let kept = try SQLiteBackup.replace(path, with: staging, stamp: stamp(clock.now()))
            try? FileManager.default.removeItem(atPath: staging + ".lock")
            return Restored(
                path: path, kept: kept, migrationsApplied: checked.applied, accountsChecked: checked.accounts, transfersChecked: checked.transfers,
                mediaFiles: media?.files ?? 0)
        } catch {
            removeStaging(staging)
            throw error
        }
    }

    /// Removes the staged copy and the files SQLite and the lock made beside it.
    static func removeStaging(_ staging: String) {
        for suffix in ["", "-wal", "-shm", ".lock"] { try? FileManager.default.removeItem(atPath: staging + suffix) }
    }

    /// Migrates the staged copy forward and checks that its books balance.
    static func verify(_ config: AppConfig, staging: String, logger: Logger) async throws -> (applied: Int, accounts: Int, transfers: Int) {
        var staged = config
        staged.database = .sqlite(path: staging)
        let result = Mutex<(Int, Int, Int)>((0, 0, 0))
        try await Startup.withMigratedDatabase(config: staged, logger: logger) { dependencies, applied in
            try await SQLiteBackup.checkSchema(staging, migrations: Engine.sqlite.migrations, logger: logger)
            let report = try await dependencies.ledger.verify(logger: logger)
            guard report.ok else {
                throw BackupError("the backup's ledger does not balance: " + report.differences.prefix(5).map { "\($0)" }.joined(separator: "; "))
            }
            result.withLock { $0 = (applied.count, report.accountsChecked, report.transfersChecked) }
        }
        return result.withLock { $0 }
    }

    /// A file-name-safe UTC time, sortable as text: 20261126T171204Z.
    static func stamp(_ date: Date) -> String {
        ISOTime.string(date).replacingOccurrences(of: "-", with: "").replacingOccurrences(of: ":", with: "").replacingOccurrences(
            of: #"\.\d+"#, with: "", options: .regularExpression)
    }
}
