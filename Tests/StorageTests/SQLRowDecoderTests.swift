import Foundation
import Storage
import TestSupport
import Testing

/// Typed rows over both engines' real results: names in snake case, times from their `_ms` columns, optionals, enums;
/// a missing or mistyped column throws, never traps.
@Suite("Typed rows")
struct SQLRowDecoderTests {
    enum Role: String, Decodable { case user, admin }

    struct Record: Decodable, Equatable {
        let id: String
        let userId: String
        let balance: Int64
        let count: Int
        let isActive: Bool
        let createdAt: Date
        let revokedAt: Date?
        let note: String?
        let role: Role
        let absentColumn: String?
    }

    @Test(arguments: TestDatabase.engines)
    func decodesRealRowsOfBothEngines(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let records = try await db.withConnection(logger: TestDatabase.logger) { tx in
                try await tx.query(
                    """
                    SELECT 'r1' AS id, 'u1' AS user_id, CAST(? AS BIGINT) AS balance, 3 AS count, ? AS is_active,
                        CAST(? AS BIGINT) AS created_at_ms, NULL AS revoked_at_ms, NULL AS note, 'admin' AS role
                    """, [Int64.max, true, Int64(1_800_000_000_123)], as: Record.self)
            }
            #expect(
                records == [
                    Record(
                        id: "r1", userId: "u1", balance: .max, count: 3, isActive: true, createdAt: Date(epochMilliseconds: 1_800_000_000_123),
                        revokedAt: nil, note: nil, role: .admin, absentColumn: nil)
                ])
        }
    }

    @Test func missingOrMistypedColumnsThrow() throws {
        let good: [String: SQLValue] = [
            "id": .text("r"), "user_id": .text("u"), "balance": .int(1), "count": .int(2), "is_active": .int(1), "created_at_ms": .int(5),
            "role": .text("user"),
        ]
        #expect(try SQLRow(good).decode(Record.self).isActive)
        for (column, bad) in [
            ("user_id", SQLValue.null), ("balance", .text("x")), ("is_active", .text("yes")), ("created_at_ms", .bytes([1])), ("role", .text("root")),
            ("count", .double(1e300)),
        ] {
            var row = good
            row[column] = bad
            #expect(throws: (any Error).self) { try SQLRow(row).decode(Record.self) }
        }
        var missing = good
        missing["role"] = nil
        let error = #expect(throws: StorageError.self) { try SQLRow(missing).decode(Record.self) }
        #expect(error?.description.contains("'role'") == true)
    }

    /// Random cells of every kind in every column: each decode answers a record or an error.
    @Test func randomRowsNeverTrap() throws {
        var generator = SystemRandomNumberGenerator()
        let columns = ["id", "user_id", "balance", "count", "is_active", "created_at_ms", "revoked_at_ms", "note", "role", "absent_column"]
        let values: [SQLValue] = [
            .null, .int(0), .int(.max), .int(.min), .double(.nan), .double(-1e19), .double(2.5), .text(""), .text("user"),
            .text("9223372036854775808"),
            .bool(true), .bytes([0, 255]),
        ]
        var decoded = 0
        for _ in 0..<5_000 {
            let row = SQLRow(
                Dictionary(
                    uniqueKeysWithValues: columns.compactMap { name in
                        Int.random(in: 0..<12, using: &generator) == 0 ? nil : (name, values.randomElement(using: &generator) ?? .null)
                    }))
            if (try? row.decode(Record.self)) != nil { decoded += 1 }
        }
        #expect(decoded < 5_000)
    }
}
