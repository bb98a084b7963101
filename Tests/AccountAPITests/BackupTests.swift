import Clock
import Foundation
import Ledger
import Logging
import Media
import Storage
import TestSupport
import Testing

@testable import AccountAPI

@Suite("Backups of the embedded database: take, restore, refuse")
struct BackupTests {
    static func config(_ dir: URL, database: String? = nil, extra: [String: String] = [:]) throws -> AppConfig {
        try AppConfig.from(
            environment: [
                "DATABASE_URL": database ?? "sqlite:\(dir.appendingPathComponent("data/db.sqlite").path)",
                "DATA_DIR": dir.appendingPathComponent("data").path,
                "ARGON2_MEMORY_KIB": "64", "ARGON2_ITERATIONS": "1", "SERVER_SECRET": String(repeating: "s", count: 40), "LOG_LEVEL": "warning",
            ].merging(extra) { $1 })
    }

    static func grant(_ config: AppConfig, users: [String]) async throws {
        try await Startup.withMigratedDatabase(config: config, logger: TestDatabase.logger) { dependencies, _ in
            for user in users {
                _ = try await dependencies.database.transaction(logger: TestDatabase.logger) {
                    try await dependencies.ledger.ledger.grant($0, userID: user, amountTokens: 40, bucket: .purchased, reason: "grant")
                }
            }
        }
    }

    /// A temporary directory with a database holding one grant, and a backup of it.
    static func backedUp() async throws -> (URL, String) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("backup-\(UUID().uuidString)")
        let config = try Self.config(dir)
        try await Self.grant(config, users: ["u1"])
        let file = dir.appendingPathComponent("backup.sqlite").path
        _ = try await Backups.take(config, to: file, mediaTo: nil)
        return (dir, file)
    }

    @Test("a backup restores into an empty place and over a database, whose file is kept; media files come along")
    func takeAndRestore() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("backup-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let config = try Self.config(dir)
        try await Self.grant(config, users: ["u1", "u2"])
        let media = try FileBlobStore(directory: Backups.mediaDirectory(config))
        let key = try await media.put(Data("sticker".utf8), fileExtension: "png")
        let file = dir.appendingPathComponent("backup.sqlite").path
        let taken = try await Backups.take(config, to: file, mediaTo: dir.appendingPathComponent("backup-media").path)
        #expect(taken.mediaFiles == 1 && taken.snapshot.bytes > 0)
        // Later writes are not in the copy; restoring over them needs --replace and keeps them beside.
        try await Self.grant(config, users: ["u3"])
        let clock = ManualTimeSource()
        await #expect(throws: BackupError.self) {
            try await Backups.restore(config, from: file, mediaFrom: nil, replace: false, clock: clock, logger: TestDatabase.logger)
        }
        let restored = try await Backups.restore(config, from: file, mediaFrom: nil, replace: true, clock: clock, logger: TestDatabase.logger)
        #expect(restored.accountsChecked > 0 && restored.transfersChecked == 2)
        #expect(FileManager.default.fileExists(atPath: restored.kept ?? ""))
        // Into a new data directory: the database and the media files.
        let elsewhere = try Self.config(dir.appendingPathComponent("elsewhere"))
        let moved = try await Backups.restore(
            elsewhere, from: file, mediaFrom: dir.appendingPathComponent("backup-media").path, replace: false, clock: clock,
            logger: TestDatabase.logger)
        #expect(moved.kept == nil && moved.mediaFiles == 1)
        #expect(try await FileBlobStore(directory: Backups.mediaDirectory(elsewhere)).get(key) == Data("sticker".utf8))
    }

    @Test("a copy whose books do not balance is refused and nothing is replaced")
    func unbalancedCopyIsRefused() async throws {
        let (dir, file) = try await Self.backedUp()
        defer { try? FileManager.default.removeItem(at: dir) }
        let tampered = try await SQLiteDatabase.open(path: file, logger: TestDatabase.logger)
        _ = try await tampered.transaction(logger: TestDatabase.logger) {
            try await $0.query("UPDATE ledger_accounts SET balance = balance + 5 WHERE user_id = 'u1'")
        }
        try await tampered.close()
        let target = try Self.config(dir.appendingPathComponent("target"))
        do {
            _ = try await Backups.restore(target, from: file, mediaFrom: nil, replace: false, clock: ManualTimeSource(), logger: TestDatabase.logger)
            Issue.record("an unbalanced backup was restored")
        } catch let error as BackupError {
            #expect(error.description.contains("does not balance"))
        }
        let left = try FileManager.default.contentsOfDirectory(atPath: dir.appendingPathComponent("target/data").path)
        #expect(!left.contains { $0.hasPrefix("db.sqlite") }, "\(left)")
    }

    @Test("a copy whose schema was edited (an append-only trigger dropped) is refused even though its books balance")
    func editedSchemaIsRefused() async throws {
        let (dir, file) = try await Self.backedUp()
        defer { try? FileManager.default.removeItem(at: dir) }
        let edited = try await SQLiteDatabase.open(path: file, logger: TestDatabase.logger)
        let trigger = try await edited.withConnection(logger: TestDatabase.logger) {
            try await $0.query("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name LIMIT 1")
        }
        let name = try #require(try trigger.first?.string("name"))
        _ = try await edited.transaction(logger: TestDatabase.logger) { try await $0.query("DROP TRIGGER \(name)") }
        try await edited.close()
        do {
            _ = try await Backups.restore(
                try Self.config(dir.appendingPathComponent("target")), from: file, mediaFrom: nil, replace: false, clock: ManualTimeSource(),
                logger: TestDatabase.logger)
            Issue.record("an edited schema was restored")
        } catch let error as BackupError {
            #expect(error.description.contains("trigger \(name) is missing"), "\(error)")
        }
    }

    @Test("scheduled backups remove only the copies they wrote, never another file or the database they serve")
    func pruneTouchesOnlyItsOwnCopies() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("backup-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        // The database served lives in the backup directory under a copy's name: the worst case.
        let live = dir.appendingPathComponent("account-service-20200101T000000Z.sqlite").path
        let config = try Self.config(dir, database: "sqlite:\(live)", extra: ["BACKUP_DIR": dir.path, "BACKUP_KEEP": "1"])
        try await Self.grant(config, users: ["u1"])
        for name in [
            "account-service-notes.sqlite", "account-service-20260101T000000Z.sqlite", "account-service-20260101T000000Z.sqlite.partial-0123abcd",
        ] {
            _ = FileManager.default.createFile(atPath: dir.appendingPathComponent(name).path, contents: Data("x".utf8))
        }
        let service = BackupService(config: config, schedule: try #require(config.backups), clock: ManualTimeSource(), logger: TestDatabase.logger)
        try await service.backUpOnce()
        let left = Set(try FileManager.default.contentsOfDirectory(atPath: dir.path)).filter {
            !$0.hasSuffix("-wal") && !$0.hasSuffix("-shm") && !$0.hasSuffix(".lock")
        }
        #expect(
            left == [
                "account-service-20200101T000000Z.sqlite", "account-service-notes.sqlite", "account-service-20270115T080000Z.sqlite", "media", "data",
            ], "\(left)")
    }

    @Test("PostgreSQL is pointed at its own tools, by the commands and by the scheduled backup's configuration")
    func postgresIsRefused() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("backup-\(UUID().uuidString)")
        let config = try Self.config(dir, database: "postgres://app@127.0.0.1:5432/app")
        do {
            _ = try await Backups.take(config, to: dir.appendingPathComponent("x.sqlite").path, mediaTo: nil)
            Issue.record("a PostgreSQL backup was attempted")
        } catch let error as BackupError {
            #expect(error.description.contains("pg_basebackup"))
        }
        #expect(throws: ConfigError.self) { try Self.config(dir, database: "postgres://app@127.0.0.1:5432/app", extra: ["BACKUP_DIR": "/tmp/b"]) }
    }

    @Test("BACKUP_EVERY takes a duration with a unit; BACKUP_KEEP and BACKUP_EVERY need BACKUP_DIR")
    func schedule() throws {
        let dir = FileManager.default.temporaryDirectory
        let six = try Self.config(dir, extra: ["BACKUP_DIR": "/tmp/b", "BACKUP_EVERY": "6h", "BACKUP_KEEP": "3"]).backups
        #expect(six?.everySeconds == 21600 && six?.keep == 3 && six?.directory == "/tmp/b")
        #expect(try Self.config(dir, extra: ["BACKUP_DIR": "/tmp/b"]).backups?.everySeconds == 86400)
        #expect(try Self.config(dir, extra: ["BACKUP_DIR": "/tmp/b", "BACKUP_EVERY": "90"]).backups?.everySeconds == 90)
        for bad in ["0s", "1s", "6x", "h", "99999999999d", "-5m", "31d"] {
            #expect(throws: ConfigError.self, "\(bad)") { try Self.config(dir, extra: ["BACKUP_DIR": "/tmp/b", "BACKUP_EVERY": bad]) }
        }
        #expect(throws: ConfigError.self) { try Self.config(dir, extra: ["BACKUP_KEEP": "3"]) }
    }
}
