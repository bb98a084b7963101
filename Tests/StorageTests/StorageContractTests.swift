import Foundation
import Storage
import Synchronization
import TestSupport
import Testing

/// The same storage contract on SQLite and PostgreSQL.
@Suite("Storage contract")
struct StorageContractTests {
    struct Refused: Error, Equatable { let why: String }

    static func makeCounter(_ db: any Database) async throws {
        try await db.transaction(logger: TestDatabase.logger) { tx in
            try await tx.query("CREATE TABLE counters (id TEXT PRIMARY KEY, value BIGINT NOT NULL)")
            try await tx.query("INSERT INTO counters (id, value) VALUES (?, ?)", ["c", 0])
        }
    }

    static func counter(_ db: any Database) async throws -> Int64 {
        try await db.withConnection(logger: TestDatabase.logger) {
            try await $0.first("SELECT value FROM counters WHERE id = ?", ["c"])!.int("value")
        }
    }

    @Test(arguments: TestDatabase.engines)
    func commitPersistsAndRollbackDiscards(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            try await Self.makeCounter(db)
            try await db.transaction(logger: TestDatabase.logger) { try await $0.query("UPDATE counters SET value = 5 WHERE id = ?", ["c"]) }
            #expect(try await Self.counter(db) == 5)
            // A domain error thrown inside the transaction reaches the caller unwrapped, and nothing is written.
            await #expect(throws: Refused(why: "no")) {
                try await db.transaction(logger: TestDatabase.logger) { tx in
                    try await tx.query("UPDATE counters SET value = 99 WHERE id = ?", ["c"])
                    throw Refused(why: "no")
                }
            }
            #expect(try await Self.counter(db) == 5)
        }
    }

    @Test(
        "a list in one bind finds exactly its strings, quotes, backslashes and all, with one SQL text for every length; NUL refused",
        arguments: TestDatabase.engines)
    func listInOneBind(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let names = ["plain", "quo\"te", "back\\slash", "ü-日本", "comma,inside", "line\nbreak", "tab\t"]
            try await db.transaction(logger: TestDatabase.logger) { tx in
                try await tx.query("CREATE TABLE listed (name TEXT NOT NULL)")
                for name in names + ["not listed", "plai"] { try await tx.query("INSERT INTO listed (name) VALUES (?)", [name]) }
            }
            let sql = "SELECT name FROM listed WHERE \(SQLDialect(engine: engine).isIn("name")) ORDER BY name"
            for count in [0, 1, 3, names.count] {
                let wanted = Array(names.prefix(count))
                let found = try await db.withConnection(logger: TestDatabase.logger) { tx in
                    try await tx.query(sql, [try SQLDialect.list(wanted)]).map { try $0.string("name") }
                }
                #expect(Set(found) == Set(wanted) && found.count == wanted.count, "\(count) names")
            }
            let refused = #expect(throws: StorageError.self) { try SQLDialect.list(["a\u{0}b"]) }
            if case .nulCharacter? = refused {} else { Issue.record("a NUL: \(String(describing: refused))") }
            guard engine == .postgres else { return }
            // A prepared statement's generic plan looks the values up in an index, not by a scan of the table.
            let plan = try await db.withConnection(logger: TestDatabase.logger) { tx in
                // As stickers by pack: many rows for each value.
                try await tx.query(
                    "CREATE TABLE wide AS SELECT 'n' || (g % 5000) AS name, g AS n, repeat('x', 40) AS pad FROM generate_series(1, 200000) g")
                try await tx.query("CREATE INDEX wide_name ON wide (name)")
                try await tx.query("ANALYZE wide")
                try await tx.query("SET plan_cache_mode = force_generic_plan")
                let listed = SQLDialect(engine: engine).isIn("name").replacingOccurrences(of: "?", with: "$1")
                try await tx.query("PREPARE listed_plan(TEXT) AS SELECT name, n, pad FROM wide WHERE \(listed)")
                return try await tx.query(#"EXPLAIN EXECUTE listed_plan('["n1", "n2"]')"#).map { try $0.string("QUERY PLAN") }
                    .joined(separator: "\n")
            }
            #expect(plan.contains("Index") && !plan.contains("Seq Scan"), "\(plan)")
        }
    }

    @Test(arguments: TestDatabase.engines)
    func concurrentWritersLoseNoUpdate(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            try await Self.makeCounter(db)
            // As many writers as the pool has connections, all at once on one row: more only queue for the pool, and
            // under the whole parallel suite on two cores that queue once outlasted the 15 s lease wait.
            let writers = 20
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<writers {
                    group.addTask {
                        try await db.transaction(logger: TestDatabase.logger) { tx in
                            let value = try await tx.first("SELECT value FROM counters WHERE id = ?" + tx.dialect.forUpdate, ["c"])!.int("value")
                            try await tx.query("UPDATE counters SET value = ? WHERE id = ?", [value + 1, "c"])
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await Self.counter(db) == Int64(writers))
        }
    }

    @Test(arguments: TestDatabase.engines)
    func serializationFailuresAreRetried(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            try await Self.makeCounter(db)
            let attempts = AttemptCounter()
            let reads = AttemptCounter()
            // Each abort is caused by another writer's commit, so a writer retries at most writers − 1 times:
            // 6 writers always fit within the helper's bounded attempts (transactionAttemptsMax = 8).
            let writers = 6
            // Read-modify-write without a row lock under SERIALIZABLE: PostgreSQL aborts conflicting
            // transactions with 40001, and the helper must retry them until every increment lands.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<writers {
                    group.addTask {
                        try await db.transaction(isolation: .serializable, logger: TestDatabase.logger) { tx in
                            attempts.increment()
                            let value = try await tx.first("SELECT value FROM counters WHERE id = ?", ["c"])!.int("value")
                            // First attempts wait (briefly) until every writer has read, so their transactions overlap.
                            let readers = reads.incrementAndGet()
                            var waited = 0
                            while engine == .postgres && reads.value < writers && readers <= writers && waited < 100 {
                                try await Task.sleep(for: .milliseconds(5))
                                waited += 1
                            }
                            try await tx.query("UPDATE counters SET value = ? WHERE id = ?", [value + 1, "c"])
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await Self.counter(db) == Int64(writers))
            if engine == .postgres { #expect(attempts.value > writers, "expected at least one retried serialization failure") }
        }
    }

    @Test(arguments: TestDatabase.engines)
    func uniqueViolationsAreReportedTheSameWay(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            try await Self.makeCounter(db)
            await #expect {
                try await db.transaction(logger: TestDatabase.logger) {
                    try await $0.query("INSERT INTO counters (id, value) VALUES (?, ?)", ["c", 1])
                }
            } throws: { error in
                if case StorageError.uniqueViolation = error { return true }
                return false
            }
        }
    }

    @Test(arguments: TestDatabase.engines)
    func valuesRoundTrip(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let boolType = engine == .postgres ? "BOOLEAN" : "INTEGER"
            let row = try await db.transaction(logger: TestDatabase.logger) { tx in
                try await tx.query("CREATE TABLE v (id TEXT PRIMARY KEY, n BIGINT, b \(boolType), t TEXT, o TEXT)")
                return try await tx.first(
                    "INSERT INTO v (id, n, b, t, o) VALUES (?, ?, ?, ?, ?) RETURNING id, n, b, t, o",
                    ["a?b", Int64.max, true, "it's 'quoted' ?", Optional<String>.none])
            }
            let r = try #require(row)
            #expect(try r.string("id") == "a?b")
            #expect(try r.int("n") == Int64.max)
            #expect(try r.bool("b") == true)
            #expect(try r.string("t") == "it's 'quoted' ?")
            #expect(r.optionalString("o") == nil)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func migrationsApplyOnceAndAreRecorded(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let first = try await db.migrate(engine.migrations, logger: TestDatabase.logger)
            #expect(first.count == engine.migrations.count)
            let second = try await db.migrate(engine.migrations, logger: TestDatabase.logger)
            #expect(second.isEmpty)
            let recorded = try await db.withConnection(logger: TestDatabase.logger) { try await $0.query("SELECT version FROM schema_migrations") }
            #expect(recorded.count == engine.migrations.count)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func concurrentStartupsApplyMigrationsOnce(engine: Engine) async throws {
        let handle = try await TestDatabase.create(engine)
        defer { Task { try? await handle.drop() } }
        // Two independent connections/pools (as two processes would have) migrate at the same moment.
        let counts = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<2 {
                group.addTask {
                    try await TestDatabase.open(handle) { db in try await db.migrate(engine.migrations, logger: TestDatabase.logger).count }
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(counts.sorted() == [0, engine.migrations.count])
    }

    /// Every pooled connection runs prepared statements with their generic plan (set at connection startup), so the
    /// batched entitlement statement is planned once per connection rather than on every call.
    @Test func connectionsUseGenericPlans() async throws {
        guard TestDatabase.engines.contains(.postgres) else { return }
        try await TestDatabase.with(.postgres) { db, _ in
            let mode = try await db.withConnection(logger: TestDatabase.logger) { try await $0.first("SHOW plan_cache_mode") }
            #expect(mode?.optionalString("plan_cache_mode") == "force_generic_plan")
        }
    }

    /// A backend the server terminates mid-transaction (an operator's `pg_terminate_backend`, a failover, a dropped
    /// database) fails the transaction promptly with `unavailable`, and the pool goes on serving. Before the fix the
    /// ROLLBACK sent on the dead connection could wait forever, taking the caller (and app shutdown) with it.
    @Test func terminatedBackendFailsTheTransactionPromptly() async throws {
        guard TestDatabase.engines.contains(.postgres) else { return }
        try await TestDatabase.with(.postgres) { pooled, _ in
            // The lease watch checks every lease-timeout period; 1 s keeps a caught hang well inside the deadline.
            let db = PostgresDatabase(pool: try #require(pooled as? PostgresDatabase).hosts.current.pool, leaseTimeoutSeconds: 1)
            for round in 0..<24 {
                // The transaction runs in its own task so that a hang fails this test instead of stalling the suite.
                let outcome = Mutex<Result<Void, any Error>?>(nil)
                Task {
                    do {
                        try await db.transaction(logger: TestDatabase.logger) { tx in
                            let pid = try await tx.first("SELECT pg_backend_pid() AS pid")!.int("pid")
                            _ = try await db.withConnection(logger: TestDatabase.logger) {
                                try await $0.query("SELECT pg_terminate_backend(CAST(? AS INTEGER)) AS done", [pid])
                            }
                            if round % 3 == 1 { try await Task.sleep(for: .milliseconds(20)) }
                            // Every third round fails at a statement inside the body, the others at COMMIT.
                            if round % 3 == 2 { try await tx.query("SELECT 1 AS one") }
                        }
                        outcome.withLock { $0 = .success(()) }
                    } catch {
                        outcome.withLock { $0 = .failure(error) }
                    }
                }
                try await waitUntil(within: .seconds(30), every: .milliseconds(20)) { outcome.withLock { $0 } != nil }
                switch outcome.withLock({ $0 }) {
                case nil: Issue.record("round \(round): the transaction on a terminated backend did not return within 10 s"); return
                case .success: Issue.record("round \(round): the transaction committed on a terminated backend")
                case .failure(let error):
                    guard case StorageError.unavailable = error else {
                        Issue.record("round \(round): expected unavailable, got \(String(reflecting: error))"); continue
                    }
                }
            }
            #expect(try await db.withConnection(logger: TestDatabase.logger) { try await $0.first("SELECT 7 AS seven")!.int("seven") } == 7)
        }
    }

    /// The lease timeout bounds only the wait for a connection: with every pooled connection busy, one more caller
    /// gets `unavailable` after about the timeout, while a leased connection that stays open runs to completion
    /// however long its work takes (the lease watch re-arms without touching it).
    @Test func leaseTimeoutBoundsOnlyTheWaitForAConnection() async throws {
        guard TestDatabase.engines.contains(.postgres) else { return }
        try await TestDatabase.with(.postgres) { pooled, _ in
            let pool = try #require(pooled as? PostgresDatabase).hosts.current.pool
            // The long leases wait for their connections with the suite's usual timeout (opening 20 connections on a
            // loaded machine can take longer than 0.5 s); the caller that finds the pool full has 0.5 s.
            let patient = PostgresDatabase(pool: pool, leaseTimeoutSeconds: TestDatabase.leaseTimeoutSeconds)
            let db = PostgresDatabase(pool: pool, leaseTimeoutSeconds: 0.5)
            let leased = AttemptCounter()
            // The holders keep their connections until told (at most 15 s: a lease that never gave up would show as a
            // success after that, not as a hang), however long the last of them took to get one.
            let released = AttemptCounter()
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<PostgresDatabase.maximumConnections {
                    group.addTask {
                        let row = try await patient.withConnection(logger: TestDatabase.logger) { tx in
                            leased.increment()
                            try await waitUntil(within: .seconds(30)) { released.value > 0 }
                            return try await tx.first("SELECT 1 AS slept")
                        }
                        #expect(try row?.int("slept") == 1)
                    }
                }
                try await waitUntil(within: .seconds(20)) { leased.value == PostgresDatabase.maximumConnections }
                try #require(leased.value == PostgresDatabase.maximumConnections)
                let started = ContinuousClock.now
                await #expect {
                    _ = try await db.withConnection(logger: TestDatabase.logger) { try await $0.query("SELECT 1 AS one") }
                } throws: { error in
                    guard case StorageError.unavailable(let why) = error else { return false }
                    return why.contains("no database connection")
                }
                let waited = ContinuousClock.now - started
                released.increment()
                #expect(waited >= .milliseconds(450) && waited < .seconds(10), "waited \(waited)")
                try await group.waitForAll()
            }
            // A leased connection that stays open outlives three watch periods of its own 0.5 s lease. (Getting the
            // connection must itself happen within 0.5 s, which a machine running the whole suite at once can miss:
            // only that is tried again.)
            var seven: Int64?
            for _ in 0..<5 where seven == nil {
                do {
                    seven = try await db.withConnection(logger: TestDatabase.logger) {
                        try await $0.first("SELECT 7 AS seven FROM pg_sleep(1.5)")!.int("seven")
                    }
                } catch StorageError.unavailable(let why) where why.contains("no database connection") {
                    continue
                }
            }
            #expect(seven == 7)
        }
    }

    /// The column types the service reads, with extremes, through the pool (PostgreSQL reads the common binary
    /// types straight from their bytes; `PostgresBatchedStatementTests` checks the same through the lanes).
    static let typedSQL = """
        SELECT CAST(-32768 AS SMALLINT) AS i2, CAST(-2147483648 AS INTEGER) AS i4, CAST(-9223372036854775808 AS BIGINT) AS i8,
          CAST(9223372036854775807 AS BIGINT) AS i8max, CAST(1 = 1 AS BOOLEAN) AS yes, CAST(1 = 0 AS BOOLEAN) AS no,
          CAST(-2.5 AS DOUBLE PRECISION) AS f8, CAST('' AS TEXT) AS empty, CAST('grüße, 🙂 and more than fifteen bytes' AS TEXT) AS utf8,
          CAST('v' AS VARCHAR(10)) AS vc, CAST(NULL AS BIGINT) AS absent, CAST(NULL AS TEXT) AS notext
        """
    static let typedValues: [String: SQLValue] = [
        "i2": .int(-32768), "i4": .int(-2_147_483_648), "i8": .int(Int64.min), "i8max": .int(Int64.max), "yes": .bool(true), "no": .bool(false),
        "f8": .double(-2.5), "empty": .text(""), "utf8": .text("grüße, 🙂 and more than fifteen bytes"), "vc": .text("v"), "absent": .null,
        "notext": .null,
    ]

    @Test(arguments: TestDatabase.engines)
    func columnTypesRead(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let row = try #require(try await db.withConnection(logger: TestDatabase.logger) { try await $0.first(Self.typedSQL, []) })
            for (column, expected) in Self.typedValues {
                // SQLite has no boolean type: its booleans are 1 and 0, which the accessors accept.
                if engine == .sqlite, case .bool(let b) = expected {
                    #expect(row[column] == .int(b ? 1 : 0), "\(column)")
                    #expect(try row.bool(column) == b)
                } else {
                    #expect(row[column] == expected, "\(column)")
                }
            }
        }
    }

    @Test(arguments: TestDatabase.engines)
    func editedAppliedMigrationIsRefused(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            _ = try await db.migrate(engine.migrations, logger: TestDatabase.logger)
            var tampered = engine.migrations
            let original = tampered[0]
            tampered[0] = Migration(version: original.version, file: original.file, sql: original.sql + "\n-- edited\n")
            await #expect {
                _ = try await db.migrate(tampered, logger: TestDatabase.logger)
            } throws: { error in
                guard case StorageError.migrationChecksumMismatch(let file) = error else { return false }
                return file == original.file && "\(error)".contains(original.file)
            }
        }
    }

    @Test(arguments: TestDatabase.engines)
    func failedMigrationLeavesNothingBehind(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let broken =
                engine.migrations + [
                    Migration(version: 9999, file: "\(engine)/9999_broken.sql", sql: "CREATE TABLE ok_part (x BIGINT);\nCREATE TABLE;")
                ]
            await #expect(throws: StorageError.self) { _ = try await db.migrate(broken, logger: TestDatabase.logger) }
            let tables = try await db.withConnection(logger: TestDatabase.logger) { tx in
                try await tx.query(
                    engine == .postgres
                        ? "SELECT table_name AS name FROM information_schema.tables WHERE table_name = 'ok_part'"
                        : "SELECT name FROM sqlite_master WHERE name = 'ok_part'")
            }
            #expect(tables.isEmpty)
        }
    }
}

final class AttemptCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func increment() { lock.withLock { count += 1 } }
    func incrementAndGet() -> Int {
        lock.withLock {
            count += 1; return count
        }
    }
    var value: Int { lock.withLock { count } }
}

@Suite("SQL helpers")
struct SQLHelperTests {
    @Test func placeholdersAreNumberedOutsideQuotesAndComments() {
        #expect(SQLDialect.numberedPlaceholders("SELECT ? , '?' -- ?\n, ?") == "SELECT $1 , '?' -- ?\n, $2")
    }

    @Test func migrationFilesSplitIntoStatements() {
        let sql =
            "-- why; a comment\nCREATE TABLE a (x TEXT DEFAULT ';');\nCREATE FUNCTION f() RETURNS trigger AS $$ BEGIN RAISE 'x;y'; END; $$ LANGUAGE plpgsql;\n"
        let statements = Migration(version: 1, file: "x.sql", sql: sql).statements
        #expect(statements.count == 2)
        #expect(statements[0] == "CREATE TABLE a (x TEXT DEFAULT ';')")
        #expect(statements[1].hasSuffix("LANGUAGE plpgsql"))
        let trigger =
            "CREATE TRIGGER t BEFORE DELETE ON a\nBEGIN\n    SELECT RAISE(ABORT, 'no; never');\n    SELECT 1;\nEND;\nCREATE INDEX i ON a (x);"
        let split = Migration(version: 1, file: "x.sql", sql: trigger).statements
        #expect(split.count == 2 && split[0].hasSuffix("END") && split[1] == "CREATE INDEX i ON a (x)", "\(split)")
    }

    /// One source per statement: `migrations/NNNN_*.sql` for both engines, `migrations/<engine>/` only where the SQL
    /// differs (or only one engine needs it); the compiled copies equal the files, each version once per engine.
    @Test func embeddedMigrationsMatchTheFiles() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        func sqlFiles(_ folder: String) throws -> [String] {
            try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("migrations/\(folder)").path)
                .filter { $0.range(of: #"^\d{4}_.+\.sql$"#, options: .regularExpression) != nil }.sorted()
        }
        let shared = try sqlFiles("")
        for engine in Engine.allCases {
            let overrides = try sqlFiles(engine.rawValue)
            var expected: [Int: String] = [:]
            for file in shared { expected[Int(file.prefix(4))!] = file }
            for file in overrides { expected[Int(file.prefix(4))!] = "\(engine.rawValue)/\(file)" }
            #expect(engine.migrations.map(\.file) == expected.keys.sorted().map { expected[$0]! }, "run scripts/embed-resources")
            for migration in engine.migrations {
                let text = try String(contentsOf: root.appendingPathComponent("migrations/\(migration.file)"), encoding: .utf8)
                #expect(text == migration.sql, "\(migration.file) differs from the compiled copy: run scripts/embed-resources")
                #expect(text.hasPrefix("-- Why:"), "\(migration.file) must open with a why-comment")
            }
        }
        // An override exists only where the SQL really differs.
        for engine in Engine.allCases {
            for file in try sqlFiles(engine.rawValue) where shared.contains(file) {
                let own = try String(contentsOf: root.appendingPathComponent("migrations/\(engine.rawValue)/\(file)"), encoding: .utf8)
                #expect(
                    own != (try String(contentsOf: root.appendingPathComponent("migrations/\(file)"), encoding: .utf8)), "\(file) overrides nothing")
            }
        }
    }

    @Test func databaseURLsParse() throws {
        #expect(try DatabaseLocation.parse(nil) == .sqlite(path: "data/account-service.sqlite"))
        #expect(try DatabaseLocation.parse("sqlite:/tmp/x.db") == .sqlite(path: "/tmp/x.db"))
        #expect(try DatabaseLocation.parse("postgres://u:p@127.0.0.1:5433/db").engine == .postgres)
        #expect(throws: StorageError.self) { try DatabaseLocation.parse("mysql://x") }
        #expect(throws: StorageError.self) { try DatabaseLocation.parse("sqlite:") }
    }
}

@Suite("Hex")
struct HexTests {
    @Test func knownDigestsEncode() {
        #expect(hexString([UInt8]()) == "")
        #expect(hexString([0x00, 0x09, 0x0a, 0x0f, 0x10, 0x9f, 0xa0, 0xff]) == "00090a0f109fa0ff")
        #expect(hexString(stride(from: UInt8(0x01), through: 0xef, by: 0x22)) == "0123456789abcdef")
    }
}
