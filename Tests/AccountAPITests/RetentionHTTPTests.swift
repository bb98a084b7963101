import Auth
import Clock
import Foundation
import HTTPTypes
import HummingbirdTesting
import Storage
import TestSupport
import Testing
import Webhooks

@testable import AccountAPI

/// What grows without bound is forgotten in batches by the sweeper, after its documented retention
/// (docs/operations.md "Retention"), and nothing younger goes with it.
@Suite("Retention")
struct RetentionHTTPTests {
    @Test(arguments: TestDatabase.engines)
    func theSweeperForgetsWhatIsPastItsRetentionInBatches(engine: Engine) async throws {
        try await TestApp.run(engine, configure: { $0.sweepIntervalSeconds = 0 }) { client, app in
            let old = try await client.signUpAndVerify(app, email: "old@example.com")
            let start = app.clock.now()
            // 38 days on: the first session expired (30 days) more than the 7 retained days ago.
            app.clock.advance(seconds: 38 * 86400)
            let fresh = try await client.signUpAndVerify(app, email: "fresh@example.com")
            let now = app.clock.now()
            try await app.dependencies.database.transaction(logger: TestDatabase.logger) { tx in
                for (id, days) in [("audit-401a", 401.0), ("audit-401b", 402.0), ("audit-401c", 403.0), ("audit-399", 399.0)] {
                    try await tx.query(
                        "INSERT INTO audit_log (id, at_ms, actor, action, subject, ip, detail) VALUES (?, ?, 'system', 'test', NULL, NULL, NULL)",
                        [id, now.addingTimeInterval(-days * 86400)])
                }
                for (id, days, status) in [("d-old", 31.0, "delivered"), ("d-old-pending", 31.0, "pending"), ("d-new", 29.0, "failed")] {
                    let at = now.addingTimeInterval(-days * 86400)
                    try await tx.query(
                        """
                        INSERT INTO webhook_deliveries (id, endpoint_id, event_id, event_type, body, status, attempts, next_attempt_at_ms,
                            retry_until_ms, created_at_ms) VALUES (?, 'e1', ?, 'tokens.spent', '{}', ?, 1, ?, ?, ?)
                        """, [id, id, status, at, at, at])
                    try await tx.query(
                        "INSERT INTO webhook_attempts (delivery_id, attempt, at_ms, status_code, error, duration_ms) VALUES (?, 1, ?, 200, NULL, 5)",
                        [id, at])
                }
            }
            #expect(try await app.rows("SELECT id FROM sessions").count == 2)
            #expect(try await app.rows("SELECT id FROM sign_up_requests WHERE created_at_ms < ?", [now.addingTimeInterval(-86400)]).count == 1)

            // Batches: at most `limit` of each table per call, oldest first.
            let first = try await app.dependencies.auth.purgeExpired(limit: 2, logger: TestDatabase.logger)
            #expect(first.auditRows == 2 && first.sessions == 1 && first.signUpRequests == 1)
            #expect(
                try await app.rows("SELECT id FROM audit_log WHERE id LIKE 'audit-%' ORDER BY id").map { try $0.string("id") } == [
                    "audit-399", "audit-401a",
                ])
            _ = try #require(try await BackgroundSweeper(dependencies: app.dependencies, intervalSeconds: 5, logger: TestDatabase.logger).sweepOnce())
            #expect(try await app.rows("SELECT id FROM audit_log WHERE id LIKE 'audit-%'").map { try $0.string("id") } == ["audit-399"])
            #expect(try await app.rows("SELECT id FROM sessions").count == 1)
            #expect(try await client.get("/api/user/token-balance", token: fresh).status == .ok)
            #expect(try await client.get("/api/user/token-balance", token: old).status == .unauthorized)
            #expect(try await app.rows("SELECT id FROM sign_up_requests WHERE created_at_ms < ?", [start.addingTimeInterval(86400)]).isEmpty)
            #expect(try await app.rows("SELECT id FROM sign_up_requests").count == 1)

            // Finished deliveries older than 30 days go with their tries; pending and younger ones stay.
            let purged = try await app.webhookWorker(sender: WebhookReceiver.sender).purge(batch: 1)
            #expect(purged.purged == 1)
            #expect(try await app.rows("SELECT id FROM webhook_deliveries ORDER BY id").map { try $0.string("id") } == ["d-new", "d-old-pending"])
            #expect(
                try await app.rows("SELECT delivery_id FROM webhook_attempts ORDER BY delivery_id").map { try $0.string("delivery_id") } == [
                    "d-new", "d-old-pending",
                ])
            // A purge goes on from where the last one reached; a delivery behind that (pending when the purge went past,
            // finished since) waits for a purge from the oldest, which the worker's loop makes every tenth time.
            try await app.write(
                "UPDATE webhook_deliveries SET status = 'delivered', created_at_ms = ? WHERE id = 'd-old-pending'",
                [now.addingTimeInterval(-40 * 86400)])
            let worker = app.webhookWorker(sender: WebhookReceiver.sender)
            #expect(try await worker.purge(from: purged.reached).purged == 0)
            #expect(try await worker.purge(from: 0).purged == 1)
            #expect(try await app.rows("SELECT id FROM webhook_deliveries").map { try $0.string("id") } == ["d-new"])
        }
    }

    /// An operator's retry that makes an old delivery pending while the purge is deleting it keeps the delivery and its
    /// tries: the purge's read found it finished, and PostgreSQL re-reads only the row it deletes once the retry commits.
    /// (SQLite has one writer at a time; the purge reads and deletes in one write transaction.)
    @Test func aRetryCommittedDuringThePurgeKeepsItsDelivery() async throws {
        try await TestApp.run(.postgres, configure: { $0.sweepIntervalSeconds = 0 }) { _, app in
            let at = app.clock.now().addingTimeInterval(-31 * 86400)
            try await app.write(
                """
                INSERT INTO webhook_deliveries (id, endpoint_id, event_id, event_type, body, status, attempts, next_attempt_at_ms,
                    retry_until_ms, created_at_ms) VALUES ('d-race', 'e1', 'evt-race', 'tokens.spent', '{}', 'delivered', 1, ?, ?, ?)
                """, [at, at, at])
            try await app.write(
                "INSERT INTO webhook_attempts (delivery_id, attempt, at_ms, status_code, error, duration_ms) VALUES ('d-race', 1, ?, 200, NULL, 5)",
                [at])
            let worker = app.webhookWorker(sender: WebhookReceiver.sender)
            let purged = try await Self.purge(app, whileWriting: "UPDATE webhook_deliveries SET status = 'pending' WHERE id = 'd-race'", []) {
                try await worker.purge()
            }
            #expect(purged.purged == 0)
            #expect(try await app.rows("SELECT status FROM webhook_deliveries WHERE id = 'd-race'").map { try $0.string("status") } == ["pending"])
            #expect(try await app.rows("SELECT attempt FROM webhook_attempts WHERE delivery_id = 'd-race'").count == 1)
        }
    }

    /// The same race in Auth's retention, where rows are rewritten in place: a code issued again for an address (and an
    /// attempt budget used again) while the purge is deleting the old one stays, young again.
    @Test func aRowRewrittenDuringAuthsPurgeStays() async throws {
        try await TestApp.run(.postgres, configure: { $0.sweepIntervalSeconds = 0 }) { _, app in
            let now = app.clock.now()
            let old = now.addingTimeInterval(-3 * 86400)
            try await app.write(
                "INSERT INTO attempt_budgets (budget_key, attempts, window_started_at_ms, last_attempt_at_ms, locked_until_ms) VALUES ('race', 1, ?, ?, NULL)",
                [old, old])
            let auth = app.dependencies.auth
            // Each purge waits on its own row: the budget's, then (the code written after) the code's.
            let budgets = try await Self.purge(
                app, whileWriting: "UPDATE attempt_budgets SET attempts = 2, last_attempt_at_ms = ? WHERE budget_key = 'race'", [now]
            ) { try await auth.purgeExpired(limit: 100, logger: TestDatabase.logger) }
            #expect(budgets.attemptBudgets == 0)
            try await app.write("UPDATE attempt_budgets SET last_attempt_at_ms = ? WHERE budget_key = 'race'", [old])
            try await app.write(
                "INSERT INTO otp_codes (email, purpose, code_hmac, expires_at_ms) VALUES ('race@example.com', 'reset', 'x', ?)",
                [old])
            let codes = try await Self.purge(
                app, whileWriting: "UPDATE otp_codes SET code_hmac = 'y', expires_at_ms = ? WHERE email = 'race@example.com'",
                [now.addingTimeInterval(600)]
            ) { try await auth.purgeExpired(limit: 100, logger: TestDatabase.logger) }
            #expect(codes.codes == 0 && codes.attemptBudgets == 1)
            #expect(
                try await app.rows("SELECT code_hmac FROM otp_codes WHERE email = 'race@example.com'").map { try $0.string("code_hmac") } == ["y"])
            #expect(try await app.rows("SELECT attempts FROM attempt_budgets WHERE budget_key = 'race'").isEmpty)
        }
    }

    /// Runs `purge` while `write` is uncommitted, commits once the purge's statement waits on the rows it wrote, and
    /// returns what the purge returned (PostgreSQL).
    static func purge<T: Sendable>(
        _ app: TestApp, whileWriting write: String, _ binds: [any SQLBindable], _ purge: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let task = try await app.dependencies.database.transaction(logger: TestDatabase.logger) { tx in
            try await tx.query(write, binds)
            let task = Task { try await purge() }
            var waiting = false
            for _ in 0..<1000 where !waiting {
                waiting = try await !app.rows("SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")
                    .isEmpty
                if !waiting { try await Task.sleep(for: .milliseconds(10)) }
            }
            #expect(waiting)
            return task
        }
        return try await task.value
    }
}
