import Foundation
import TestSupport
import Testing

@testable import Storage

@Suite("PostgreSQL prepared statements")
struct PreparedStatementTests {
    @Test("SQL gets a slot on its third run, keeps it, and only plain reads and writes are prepared")
    func slotsGoToRepeatedReadsAndWrites() {
        let registry = PreparedStatements()
        let sql = "SELECT id FROM users WHERE email = ? -- \(UUID())"
        #expect(registry.slot(for: sql) == nil)
        #expect(registry.slot(for: sql) == nil)
        let slot = registry.slot(for: sql)
        #expect(slot == 0)
        #expect(registry.slot(for: sql) == slot)
        #expect(registry.sql(slot: 0).hasPrefix("SELECT id FROM users WHERE email = $1"))
        for statement in ["BEGIN", "COMMIT", "SAVEPOINT idempotent_operation", "CREATE TABLE t (a INT)"] {
            for _ in 0..<5 { #expect(registry.slot(for: statement) == nil, "\(statement)") }
        }
        for statement in ["  insert into t VALUES (?)", "UPDATE t SET a = ?", "DELETE FROM t", "WITH x AS (SELECT 1) SELECT * FROM x"] {
            for _ in 0..<3 { _ = registry.slot(for: statement) }
            #expect(registry.slot(for: statement) != nil, "\(statement)")
        }
    }

    @Test("the texts of one statement whose lists vary in length (a family) take at most familySlots slots")
    func listLengthsShareOneSlot() {
        let registry = PreparedStatements()
        func run(_ sql: String) -> Int? {
            for _ in 1..<PreparedStatements.threshold { _ = registry.slot(for: sql) }
            return registry.slot(for: sql)
        }
        func list(_ item: String, _ count: Int) -> String { Array(repeating: item, count: count).joined(separator: ", ") }
        let family = PreparedStatements.familySlots
        for count in 1...10 {
            let slot = run("DELETE FROM outbox_events WHERE id IN (\(list("?", count))) RETURNING id")
            #expect(slot == (count <= family ? count - 1 : nil), "\(count) ids")
        }
        // Rows of binds with parentheses inside, and a constant in them (as SQLite's delivery inserts).
        let row = "(CAST(? AS TEXT), ?, 'pending', 0)"
        for count in [500, 3, 1, 2, 64, 7] {
            let slot = run("INSERT INTO deliveries VALUES \(list(row, count)) ON CONFLICT DO NOTHING")
            #expect((slot != nil) == [500, 3, 1, 2].contains(count), "\(count) rows")
        }
        // Fixed statements of the same look are not one family: their words differ.
        for sql in [
            "INSERT INTO users (id, email) VALUES (?, ?)", "INSERT INTO users (id, email, name) VALUES (?, ?, ?)",
            "SELECT a FROM t WHERE b IN (?, ?) AND c = ?", "SELECT a FROM t WHERE b IN (?, ?) AND d = ?",
        ] {
            #expect(run(sql) != nil, "\(sql)")
        }
        // Rows as one-row SELECTs joined by UNION ALL (the webhook record's states).
        let state = "SELECT CAST(? AS TEXT) AS id, CAST(? AS BIGINT) AS attempt, CAST(? AS TEXT) AS status"
        let record = (1...40).map { rows in
            PreparedStatements.shape(
                of:
                    "UPDATE d SET status = v.status FROM (\(Array(repeating: state, count: rows).joined(separator: " UNION ALL "))) AS v WHERE d.id = v.id"
            )
        }
        #expect(Set(record).count == 1)
        #expect(record[0].contains(state))
        #expect(PreparedStatements.shape(of: "VALUES (?, ?), (?, ?), (?, ?)") == "VALUES (?)")
        #expect(PreparedStatements.shape(of: "WHERE x = ? AND y IN (?,?,  ?)") == "WHERE x = ? AND y IN (?)")
    }

    @Test("once every slot is taken, further SQL runs unprepared")
    func slotsRunOut() {
        let registry = PreparedStatements()
        for index in 0..<PreparedSlots.all.count {
            for _ in 0..<3 { _ = registry.slot(for: "SELECT \(index)") }
        }
        #expect(registry.slot(for: "SELECT \(PreparedSlots.all.count - 1)") == PreparedSlots.all.count - 1)
        for _ in 0..<5 { #expect(registry.slot(for: "SELECT 'one more'") == nil) }
    }
}

@Suite("PostgreSQL binds")
struct PostgresBindTests {
    /// A prepared statement's parameter types are fixed on each connection by its first call there. When that call binds
    /// NULL, the server infers the type from the SQL (here jsonb, bigint, text, boolean, bytea); every later value, of
    /// whatever Swift type, must still be read as that type (a spend with metadata after one without answered 500).
    @Test func valuesAfterAFirstNullAreReadAsTheInferredType() async throws {
        try await TestDatabase.with(.postgres) { db, _ in
            let sql = "SELECT (?::JSONB)::TEXT AS j, ?::BIGINT AS n, ?::TEXT AS t, ?::BOOLEAN AS b, ?::BYTEA AS y -- \(UUID())"
            try await db.withConnection(logger: TestDatabase.logger) { connection in
                for _ in 0..<PreparedStatements.threshold + 1 {  // prepared on this connection with NULLs
                    let row = try #require(try await connection.first(sql, [SQLValue](repeating: .null, count: 5)))
                    #expect(row["j"] == .null && row["n"] == .null)
                }
                let row = try #require(
                    try await connection.first(sql, [#"{"a":1}"#, "42", 7, true, SQLValue.bytes([0, 1, 0xfe])] as [any SQLBindable]))
                #expect(try row.string("j") == #"{"a": 1}"#)
                #expect(try row.int("n") == 42)
                #expect(try row.string("t") == "7")
                #expect(try row.bool("b"))
                #expect(row["y"] == .bytes([0, 1, 0xfe]))
                let extremes = try #require(
                    try await connection.first(
                        sql, ["[1e400, \"é😀\"]", String(Int64.min), Int64.max, false, SQLValue.bytes([])] as [any SQLBindable]))
                #expect(try extremes.int("n") == Int64.min)
                #expect(try extremes.string("t") == String(Int64.max))
                #expect(try !extremes.bool("b"))
            }
        }
    }
}
