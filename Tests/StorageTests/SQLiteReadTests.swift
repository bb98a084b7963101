import Foundation
import Logging
import Testing

@testable import Storage

@Suite("SQLite statements and quick reads")
struct SQLiteReadTests {
    static func temporaryPath() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-read-\(UUID().uuidString).sqlite").path
    }

    /// The database file and the files SQLite and the lock keep beside it.
    static func remove(_ path: String) {
        for suffix in ["", "-wal", "-shm", ".lock"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }

    @Test("the quick readers map the file as configured (SQLITE_MMAP_MIB), the other reader does not, and a mapped read sees what the writer commits")
    func readConnectionsMapTheFile() async throws {
        let logger = Logger(label: "test")
        for mapMiB in [0, 16] {
            let path = Self.temporaryPath()
            defer { Self.remove(path) }
            let database = try await SQLiteDatabase.open(path: path, mapMiB: mapMiB, logger: logger)
            try await database.transaction(logger: logger) { tx in
                _ = try await tx.query("CREATE TABLE t (a INTEGER)", [])
                _ = try await tx.query("INSERT INTO t VALUES (1)", [])
            }
            #expect(try await database.quickQuery("PRAGMA mmap_size", [], logger: logger).first?.int("mmap_size") == Int64(mapMiB) << 20)
            // The reader for longer reads (history, audit pages, verify) reads page by page: its pages would count in the RSS again.
            #expect(try await database.withConnection(logger: logger) { try await $0.query("PRAGMA mmap_size") }.first?.int("mmap_size") == 0)
            try await database.transaction(logger: logger) { _ = try await $0.query("UPDATE t SET a = 2", []) }
            #expect(try await database.quickQuery("SELECT a FROM t", [], logger: logger).first?.int("a") == 2)
            try await database.close()
        }
    }

    @Test("quick reads on many tasks at once, beside a writer, each see whole transactions and never go back in time")
    func parallelQuickReadsSeeWholeTransactions() async throws {
        let logger = Logger(label: "test")
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        let database = try await SQLiteDatabase.open(path: path, mapMiB: 16, logger: logger)
        try await database.transaction(logger: logger) { _ = try await $0.query("CREATE TABLE t (a INTEGER NOT NULL)", []) }
        // Each transaction inserts +1 and -1: a read that saw half of one would find an odd count or a non-zero sum.
        try await withThrowingTaskGroup(of: Int.self) { group in
            group.addTask {
                for _ in 0..<200 {
                    try await database.transaction(logger: logger) { tx in
                        _ = try await tx.query("INSERT INTO t VALUES (1)", [])
                        _ = try await tx.query("INSERT INTO t VALUES (-1)", [])
                    }
                }
                return 400
            }
            for _ in 0..<8 {
                group.addTask {
                    var seen = 0
                    for _ in 0..<300 {
                        let row = try #require(
                            try await database.quickQuery("SELECT COUNT(*) AS n, COALESCE(SUM(a), 0) AS s FROM t", [], logger: logger).first)
                        let (count, sum) = (try row.int("n"), try row.int("s"))
                        #expect(count % 2 == 0 && sum == 0 && count >= seen)
                        seen = Int(count)
                    }
                    return seen
                }
            }
            for try await seen in group { #expect(seen <= 400) }
        }
        #expect(try await database.quickQuery("SELECT COUNT(*) AS n FROM t", [], logger: logger).first?.int("n") == 400)
        try await database.close()
    }

    @Test("a cached statement is not re-prepared when the values bound to it change (query planner stability guarantee)")
    func boundValuesDoNotReprepare() throws {
        let connection = try SQLiteConnection(path: ":memory:")
        defer { connection.close() }
        _ = try connection.query("CREATE TABLE holds (user_id TEXT NOT NULL, name TEXT NOT NULL COLLATE NOCASE, expires_at_ms BIGINT NOT NULL)", [])
        _ = try connection.query("CREATE INDEX holds_user_expiry ON holds (user_id, expires_at_ms)", [])
        _ = try connection.query("CREATE INDEX holds_name ON holds (name)", [])
        for i in 0..<50 { _ = try connection.query("INSERT INTO holds VALUES (?, ?, ?)", [.text("u\(i % 5)"), .text("n\(i)"), .int(Int64(i))]) }
        _ = try connection.query("ANALYZE", [])
        // A range on an indexed column with a moving "now", and a LIKE whose pattern is bound: both would make SQLite
        // re-prepare on every new value without the guarantee.
        let range = "SELECT COUNT(*) AS n FROM holds WHERE user_id = ? AND expires_at_ms > ?"
        let like = "SELECT COUNT(*) AS n FROM holds WHERE name LIKE ?"
        for i in 0..<20 {
            #expect(
                try connection.query(range, [.text("u1"), .int(Int64(i))]).first?.int("n") == Int64((i..<50).filter { $0 % 5 == 1 && $0 > i }.count))
            #expect(try connection.query(like, [.text("n\(i)%")]).first?.int("n") ?? 0 >= 1)
        }
        #expect(connection.reprepareCount(range) == 0)
        #expect(connection.reprepareCount(like) == 0)
    }

    @Test("rows of a cached statement name its current columns, also after a schema change re-prepares it")
    func cachedColumnNamesFollowTheSchema() throws {
        let connection = try SQLiteConnection(path: ":memory:")
        defer { connection.close() }
        _ = try connection.query("CREATE TABLE t (a INTEGER)", [])
        _ = try connection.query("INSERT INTO t VALUES (1), (2)", [])
        let all = "SELECT * FROM t ORDER BY a"
        for _ in 0..<3 {
            let rows = try connection.query(all, [])
            #expect(rows.map { $0.optionalInt("a") } == [1, 2])
            #expect(rows.first?.columns.names == ["a"])
        }
        _ = try connection.query("ALTER TABLE t ADD COLUMN b TEXT DEFAULT 'x'", [])
        let rows = try connection.query(all, [])
        #expect(rows.first?.columns.names == ["a", "b"])
        #expect(rows.map { $0.optionalString("b") } == ["x", "x"])
        #expect(rows.map { $0.optionalInt("a") } == [1, 2])
        #expect(rows.first?["missing"] == .null)
    }

    @Test("quick reads answer on the calling thread, many at once, see committed writes at once, and stop after close")
    func quickReads() async throws {
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        let logger = Logger(label: "test")
        let db = try await SQLiteDatabase.open(path: path, logger: logger)
        try await db.transaction(logger: logger) { tx in
            try await tx.query("CREATE TABLE counters (id TEXT PRIMARY KEY, value BIGINT NOT NULL)")
            try await tx.query("INSERT INTO counters VALUES ('c', 0)")
        }
        // More readers at once than quick connections: the rest take the reader thread, all answer.
        let values = try await withThrowingTaskGroup(of: Int64.self) { group in
            for _ in 0..<64 {
                group.addTask { try await db.quickQuery("SELECT value FROM counters WHERE id = ?", ["c"], logger: logger).first!.int("value") }
            }
            return try await group.reduce(into: [Int64]()) { $0.append($1) }
        }
        #expect(values == Array(repeating: 0, count: 64))
        for step in 1...5 {
            try await db.transaction(logger: logger) { try await $0.query("UPDATE counters SET value = value + 1 WHERE id = 'c'") }
            #expect(try await db.quickQuery("SELECT value FROM counters WHERE id = ?", ["c"], logger: logger).first?.int("value") == Int64(step))
        }
        // Quick connections are read-only.
        await #expect(throws: (any Error).self) { try await db.quickQuery("UPDATE counters SET value = 0", [], logger: logger) }
        try await db.close()
        await #expect(throws: (any Error).self) { try await db.quickQuery("SELECT value FROM counters", [], logger: logger) }
    }

    @Test("another process holding the write lock past DATABASE_LOCK_TIMEOUT_SECONDS fails a transaction as locked (a 503), and reads go on")
    func writeLockHeldElsewhereFailsAsLocked() async throws {
        let logger = Logger(label: "test")
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        let database = try await SQLiteDatabase.open(path: path, lockTimeoutSeconds: 1, logger: logger)
        try await database.transaction(logger: logger) { tx in
            _ = try await tx.query("CREATE TABLE t (a INTEGER NOT NULL)", [])
            _ = try await tx.query("INSERT INTO t VALUES (1)", [])
        }
        // Another process's connection (the CLI's, say) takes the write lock and keeps it.
        let holder = try SQLiteConnection(path: path)
        _ = try holder.query("BEGIN IMMEDIATE", [])
        _ = try holder.query("UPDATE t SET a = 2", [])
        let started = ContinuousClock.now
        let refused = await #expect(throws: StorageError.self) {
            try await database.transaction(logger: logger) { _ = try await $0.query("UPDATE t SET a = a + 10", []) }
        }
        guard case .locked = refused else { Issue.record("expected locked, got \(String(describing: refused))"); return }
        let waited = ContinuousClock.now - started
        #expect(waited >= .milliseconds(900) && waited < .seconds(5), "waited \(waited)")
        #expect(try await database.quickQuery("SELECT a FROM t", [], logger: logger).first?.int("a") == 1)
        // Once the holder commits, the same transaction goes through, and the refused one wrote nothing.
        _ = try holder.query("COMMIT", [])
        holder.close()
        try await database.transaction(logger: logger) { _ = try await $0.query("UPDATE t SET a = a + 10", []) }
        #expect(try await database.quickQuery("SELECT a FROM t", [], logger: logger).first?.int("a") == 12)
        try await database.close()
    }
}
