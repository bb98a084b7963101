import Foundation
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
