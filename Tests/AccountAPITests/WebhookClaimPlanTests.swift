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
                    var sql = ""
                    var number = 0
                    for character in WebhookWorker.claimStatement(postgres: true) {
                        guard character == "?" else {
                            sql.append(character)
                            continue
                        }
                        number += 1
                        sql += "$\(number)"
                    }
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
}
