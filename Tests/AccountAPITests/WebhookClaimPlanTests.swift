import Foundation
import Storage
import TestSupport
import Testing

@testable import AccountAPI
@testable import Webhooks

/// The service's PostgreSQL connections keep the generic plan a statement got on its first call there. The webhook
/// claim is planned so that this plan walks the due index in order and stops after the batch, even when the statistics
/// at that moment say the deliveries table is empty while a backlog sits in it (a burst fanned out, an endpoint down for
/// a day): without its planner settings the same statement sorts the whole backlog (667 ms a claim at a million).
@Suite("Webhook claim plan")
struct WebhookClaimPlanTests {
    /// The statement with its `?` binds numbered `$1`, `$2`, … (for PREPARE), and how many there are.
    static func numbered(_ statement: String) -> (sql: String, count: Int) {
        var sql = ""
        var number = 0
        for character in statement {
            guard character == "?" else {
                sql.append(character)
                continue
            }
            number += 1
            sql += "$\(number)"
        }
        return (sql, number)
    }

    @Test func theClaimWalksTheDueIndexWhateverTheStatisticsSay() async throws {
        try await TestApp.run(.postgres, configure: { $0.sweepIntervalSeconds = 0 }) { _, app in
            let database = app.dependencies.database
            try await database.transaction(logger: TestDatabase.logger) { tx in
                // Never analysed while the test runs: its statistics stay those of an empty table.
                try await tx.query("ALTER TABLE webhook_deliveries SET (autovacuum_enabled = false)")
                try await tx.query(
                    """
                    INSERT INTO webhook_endpoints (id, url, events, secret_sealed, created_at_ms, updated_at_ms)
                    VALUES ('plan-endpoint', 'https://example.com/hook', 'tokens.spent', 'sealed', 0, 0)
                    """)
                try await tx.query(
                    """
                    INSERT INTO webhook_deliveries (id, endpoint_id, event_id, event_type, body, status, attempts, next_attempt_at_ms,
                        retry_until_ms, created_at_ms)
                    SELECT 'plan-' || g, 'plan-endpoint', 'evt-' || g, 'tokens.spent', '{}', 'pending', 0, 1000 + g, 9000000000000, 1000 + g
                    FROM generate_series(1, 20000) g
                    """)
            }
            func plan(_ settings: [String]) async throws -> String {
                try await database.transaction(logger: TestDatabase.logger) { tx in
                    for setting in settings + ["SET LOCAL plan_cache_mode = force_generic_plan"] { try await tx.query(setting) }
                    let sql = Self.numbered(WebhookWorker.claimStatement(postgres: true)).sql
                    try await tx.query("PREPARE claim_plan(bigint, bigint, bigint, bigint, bigint) AS \(sql)")
                    let rows = try await tx.query("EXPLAIN EXECUTE claim_plan(1, 1, 9000000000000, 1, 32)")
                    try await tx.query("DEALLOCATE claim_plan")
                    return try rows.map { try $0.string("QUERY PLAN") }.joined(separator: "\n")
                }
            }
            let planned = try await plan(WebhookWorker.claimPlannerSettings)
            #expect(planned.contains("Index Scan using webhook_deliveries_due"), "\(planned)")
            #expect(!planned.contains("Sort"), "\(planned)")
            // The rule can fail: the same statement planned without the settings sorts the backlog.
            #expect(try await plan([]).contains("Sort"))
        }
    }

    /// A try's new state is looked up by the delivery's key, even when the statistics were made while no delivery was
    /// pending and a burst has made a million pending since (`recordStatement`: with a literal 'pending' the generic plan
    /// read the pending index whole, 533 ms a batch during a million-event fan-out).
    @Test func recordingTriesLooksUpEachDeliveryWhateverTheStatisticsSay() async throws {
        try await TestApp.run(.postgres, configure: { $0.sweepIntervalSeconds = 0 }) { _, app in
            let database = app.dependencies.database
            func insert(_ prefix: String, status: String) async throws {
                try await database.transaction(logger: TestDatabase.logger) { tx in
                    try await tx.query(
                        """
                        INSERT INTO webhook_deliveries (id, endpoint_id, event_id, event_type, body, status, attempts, next_attempt_at_ms,
                            retry_until_ms, created_at_ms)
                        SELECT ? || g, 'record-endpoint', ? || g, 'tokens.spent', '{}', ?, 1, 1000 + g, 9000000000000, 1000 + g
                        FROM generate_series(1, 20000) g
                        """, [prefix, prefix, status])
                }
            }
            try await database.transaction(logger: TestDatabase.logger) { tx in
                try await tx.query("ALTER TABLE webhook_deliveries SET (autovacuum_enabled = false)")
                try await tx.query(
                    """
                    INSERT INTO webhook_endpoints (id, url, events, secret_sealed, created_at_ms, updated_at_ms)
                    VALUES ('record-endpoint', 'https://example.com/hook', 'tokens.spent', 'sealed', 0, 0)
                    """)
            }
            try await insert("done-", status: "delivered")
            _ = try await database.withConnection(logger: TestDatabase.logger) { try await $0.query("ANALYZE webhook_deliveries") }
            try await insert("burst-", status: "pending")  // after the statistics: they say none is pending
            func plan(_ statement: String) async throws -> String {
                try await database.transaction(logger: TestDatabase.logger) { tx in
                    try await tx.query("SET LOCAL plan_cache_mode = force_generic_plan")
                    let (sql, number) = Self.numbered(statement)
                    try await tx.query("PREPARE record_plan AS \(sql)")
                    let row = ["'burst-1'", "1", "'delivered'", "1", "200", "NULL", "1"].joined(separator: ", ")
                    let binds = Array(repeating: row, count: 32).joined(separator: ", ") + (number > 32 * 7 ? ", 'pending'" : "")
                    let rows = try await tx.query("EXPLAIN EXECUTE record_plan(\(binds))")
                    try await tx.query("DEALLOCATE record_plan")
                    return try rows.map { try $0.string("QUERY PLAN") }.joined(separator: "\n")
                }
            }
            let statement = WebhookWorker.recordStatement(rows: 32)
            let planned = try await plan(statement)
            #expect(planned.contains("webhook_deliveries_pkey") && !planned.contains("webhook_deliveries_due"), "\(planned)")
            // The rule can fail: with the status as a literal, the same plan reads the pending deliveries' index.
            let literal = statement.replacingOccurrences(
                of: "webhook_deliveries.status = CAST(? AS TEXT)", with: "webhook_deliveries.status = 'pending'")
            #expect(literal != statement)
            #expect(try await plan(literal).contains("webhook_deliveries_due"))
        }
    }
}
