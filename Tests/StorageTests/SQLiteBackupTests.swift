import Foundation
import Logging
import Synchronization
import Testing

@testable import Storage

@Suite("SQLite backups: online snapshots, checks before a restore, the swap")
struct SQLiteBackupTests {
    static func directory() throws -> URL {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-backup-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir
    }

    static let logger = Logger(label: "test")

    /// A fresh directory with `db.sqlite` in it, open and migrated.
    static func migratedDatabase() async throws -> (URL, String, SQLiteDatabase) {
        let dir = try directory()
        let path = dir.appendingPathComponent("db.sqlite").path
        let database = try await SQLiteDatabase.open(path: path, logger: logger)
        _ = try await database.migrate(migrations, logger: logger)
        return (dir, path, database)
    }
    static let migrations = [Migration(version: 1, file: "0001_t.sql", sql: "-- Why: a test table.\nCREATE TABLE t (n INTEGER NOT NULL)")]

    @Test("a snapshot taken while another task commits holds every row committed before it began, and passes the checks")
    func snapshotUnderWrites() async throws {
        let (dir, path, database) = try await Self.migratedDatabase()
        defer { try? FileManager.default.removeItem(at: dir) }
        let committed = Atomic(0)
        let writer = Task {
            var n = 0
            while !Task.isCancelled && n < 100_000 {
                n += 1
                let value = n
                try await database.transaction(logger: Self.logger) { _ = try await $0.query("INSERT INTO t (n) VALUES (?)", [value]) }
                committed.store(n, ordering: .sequentiallyConsistent)
            }
        }
        while committed.load(ordering: .sequentiallyConsistent) < 200 { try await Task.sleep(for: .milliseconds(5)) }
        let before = committed.load(ordering: .sequentiallyConsistent)
        let snapshot = try await SQLiteBackup.snapshot(of: path, to: dir.appendingPathComponent("copy.sqlite").path)
        let after = committed.load(ordering: .sequentiallyConsistent)
        writer.cancel()
        _ = try? await writer.value
        try await database.close()
        #expect(snapshot.bytes > 0)
        try await SQLiteBackup.check(snapshot.path, migrations: Self.migrations)
        let copy = try await SQLiteDatabase.open(path: snapshot.path, logger: Self.logger)
        let rows = try await copy.withConnection(logger: Self.logger) { try await $0.query("SELECT COUNT(*) AS c, MAX(n) AS m FROM t") }
        try await copy.close()
        let count = Int(try rows.first?.int("c") ?? -1)
        // Every row acknowledged before the snapshot began is there, in order, with none missing in between.
        #expect(count >= before && count <= after + 1, "before \(before), copy \(count), after \(after)")
        #expect(Int(try rows.first?.int("m") ?? -1) == count)
        // A backup never overwrites, and leaves no partial file behind.
        await #expect(throws: BackupError.self) { try await SQLiteBackup.snapshot(of: path, to: snapshot.path) }
        #expect(!FileManager.default.fileExists(atPath: snapshot.path + ".partial"))
    }

    @Test("two backups to one name at once: one copy wins whole, the other reports it, no partial file is left")
    func racingBackupsToOneName() async throws {
        let (dir, path, database) = try await Self.migratedDatabase()
        defer { try? FileManager.default.removeItem(at: dir) }
        try await database.transaction(logger: Self.logger) { tx in
            for n in 0..<2000 { _ = try await tx.query("INSERT INTO t (n) VALUES (?)", [n]) }
        }
        let target = dir.appendingPathComponent("copy.sqlite").path
        let results = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<4 { group.addTask { (try? await SQLiteBackup.snapshot(of: path, to: target)) != nil } }
            return await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        try await database.close()
        #expect(results.filter { $0 }.count == 1, "\(results)")
        try await SQLiteBackup.check(target, migrations: Self.migrations)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.contains("partial") }.isEmpty)
    }

    @Test("a copy is refused when it is not SQLite, comes from a newer schema, or carries an edited migration")
    func checksRefuse() async throws {
        let dir = try Self.directory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let garbage = dir.appendingPathComponent("garbage.sqlite").path
        _ = FileManager.default.createFile(atPath: garbage, contents: Data(repeating: 0x41, count: 8192))
        await #expect(throws: BackupError.self) { try await SQLiteBackup.check(garbage, migrations: Self.migrations) }
        let empty = dir.appendingPathComponent("empty.sqlite").path
        try await SQLiteDatabase.open(path: empty, logger: Self.logger).close()
        await #expect(throws: BackupError.self) { try await SQLiteBackup.check(empty, migrations: Self.migrations) }

        let newer = dir.appendingPathComponent("newer.sqlite").path
        let database = try await SQLiteDatabase.open(path: newer, logger: Self.logger)
        let later = Migration(version: 2, file: "0002_u.sql", sql: "-- Why: a later table.\nCREATE TABLE u (n INTEGER)")
        _ = try await database.migrate(Self.migrations + [later], logger: Self.logger)
        try await database.close()
        try await SQLiteBackup.check(newer, migrations: Self.migrations + [later])
        do {
            try await SQLiteBackup.check(newer, migrations: Self.migrations)
            Issue.record("a schema newer than the binary was accepted")
        } catch let error as BackupError {
            #expect(error.description.contains("unknown to this binary"))
        }
        let edited = [Migration(version: 1, file: "0001_t.sql", sql: "-- Why: edited.\nCREATE TABLE t (n INTEGER)"), later]
        do {
            try await SQLiteBackup.check(newer, migrations: edited)
            Issue.record("an edited migration was accepted")
        } catch let error as BackupError {
            #expect(error.description.contains("checksum"))
        }
    }

    @Test("the swap is refused while a process has the database open, keeps the file it replaces, and drops its WAL")
    func replaceRespectsOpenDatabases() async throws {
        let (dir, path, live) = try await Self.migratedDatabase()
        defer { try? FileManager.default.removeItem(at: dir) }
        let copy = try await SQLiteBackup.snapshot(of: path, to: dir.appendingPathComponent("copy.sqlite").path)
        #expect(throws: BackupError.self) { try SQLiteBackup.replace(path, with: copy.path, stamp: "x") }
        // While a restore holds the file, nobody opens it.
        try await live.close()
        let restoring = try #require(SQLiteFileLock(path: path, exclusive: true))
        await #expect(throws: StorageError.self) { try await SQLiteDatabase.open(path: path, logger: Self.logger).close() }
        restoring.release()
        let kept = try SQLiteBackup.replace(path, with: copy.path, stamp: "20261126T000000Z")
        #expect(kept == path + ".replaced-20261126T000000Z")
        #expect(FileManager.default.fileExists(atPath: kept ?? ""))
        #expect(!FileManager.default.fileExists(atPath: path + "-wal"))
        let reopened = try await SQLiteDatabase.open(path: path, logger: Self.logger)
        #expect(try await reopened.migrate(Self.migrations, logger: Self.logger).isEmpty)
        try await reopened.close()
    }
}
