import Clock
import Foundation
import Storage
import Synchronization
import TestSupport
import Testing

@testable import AccountAPI
@testable import Webhooks

@Suite("Webhook fan-out")
struct WebhookFanOutTests {
    /// Several workers (as on several nodes) fan out one backlog at once. Each reads the outbox's head without a lock, so
    /// they render the same events; only the one whose write claims an event inserts its deliveries. Each event must make
    /// its deliveries exactly once (`balance.low` included) and leave the outbox.
    @Test(arguments: Engine.allCases)
    func parallelPassesFanEachEventOutOnce(engine: Engine) async throws {
        try await TestApp.run(engine, configure: { $0.sweepIntervalSeconds = 0 }) { _, app in
            let database = app.dependencies.database
            let events = 600
            try await database.transaction(logger: TestDatabase.logger) { tx in
                try await tx.query(
                    """
                    INSERT INTO webhook_endpoints (id, url, events, balance_low_threshold, secret_sealed, created_at_ms, updated_at_ms)
                    VALUES ('fan-a', 'https://example.com/a', 'tokens.spent', NULL, 'sealed', 0, 0),
                        ('fan-b', 'https://example.com/b', 'tokens.spent,balance.low', 10, 'sealed', 0, 0)
                    """)
                // Every third spend crosses fan-b's threshold (12 → 5).
                try await tx.query(
                    """
                    INSERT INTO outbox_events (id, type, user_id, data, balance_before, balance_after, created_at_ms)
                    WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?)
                    SELECT 'evt_' || (1000000 + n), 'tokens.spent', 'fan-user', '{"amount":1}', 12, CASE WHEN n % 3 = 0 THEN 5 ELSE 11 END, 1000
                    FROM g
                    """, [events])
            }
            let worker = app.webhookWorker(sender: WebhookReceiver.sender)
            let passes = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<6 {
                    group.addTask {
                        var passes = 0
                        while try await worker.fanOut(limit: 50) > 0 { passes += 1 }
                        return passes
                    }
                }
                return try await group.reduce(0, +)
            }
            #expect(passes >= events / 50)
            let left = try await database.withConnection(logger: TestDatabase.logger) { try await $0.query("SELECT id FROM outbox_events") }
            #expect(left.isEmpty)
            let rows = try await database.withConnection(logger: TestDatabase.logger) {
                try await $0.query("SELECT endpoint_id, event_id, event_type FROM webhook_deliveries ORDER BY endpoint_id, event_id")
            }
            let keys = try rows.map { "\(try $0.string("endpoint_id")) \(try $0.string("event_id")) \(try $0.string("event_type"))" }
            var expected: [String] = []
            for n in 1...events { expected += ["fan-a evt_\(1_000_000 + n) tokens.spent", "fan-b evt_\(1_000_000 + n) tokens.spent"] }
            for n in stride(from: 3, through: events, by: 3) { expected.append("fan-b evt_\(1_000_000 + n)_low balance.low") }
            #expect(keys.count == expected.count)
            #expect(keys == expected.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }))
        }
    }

    /// The fan-out loop reads after the last event it read; an event committed late with an earlier id (its transaction
    /// took longer than later ones) sits behind that cursor, and must still go out once the loop comes back to the head.
    @Test(arguments: Engine.allCases)
    func anEventCommittedBehindTheCursorStillGoesOut(engine: Engine) async throws {
        try await TestApp.run(
            engine,
            configure: {
                $0.sweepIntervalSeconds = 0; $0.webhooks.pollSeconds = 0.05
            }
        ) { _, app in
            let database = app.dependencies.database
            try await app.write(
                """
                INSERT INTO webhook_endpoints (id, url, events, balance_low_threshold, secret_sealed, created_at_ms, updated_at_ms)
                VALUES ('fan-a', 'https://example.com/a', 'tokens.spent', NULL, 'sealed', 0, 0)
                """)
            try await app.write(
                """
                INSERT INTO outbox_events (id, type, user_id, data, balance_before, balance_after, created_at_ms)
                WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 3000)
                SELECT 'evt_' || (1000000 + n), 'tokens.spent', 'fan-user', '{"amount":1}', NULL, NULL, 1000 FROM g
                """)
            let running = Mutex(true)
            let worker = app.webhookWorker(sender: WebhookReceiver.sender)
            let loop = Task { await worker.fanOutPasses(keepGoing: { running.withLock { $0 } }) }
            func left() async throws -> Int {
                try await database.withConnection(logger: TestDatabase.logger) { try await $0.query("SELECT id FROM outbox_events") }.count
            }
            for _ in 0..<3000 {
                if try await left() <= 2500 { break }
                try await Task.sleep(for: .milliseconds(10))
            }
            try await app.write(
                """
                INSERT INTO outbox_events (id, type, user_id, data, balance_before, balance_after, created_at_ms)
                VALUES ('evt_0999999', 'tokens.spent', 'fan-user', '{"amount":1}', NULL, NULL, 1000)
                """)
            for _ in 0..<6000 {
                if try await left() == 0 { break }
                try await Task.sleep(for: .milliseconds(10))
            }
            running.withLock { $0 = false }
            await loop.value
            #expect(try await left() == 0)
            let late = try await app.rows("SELECT id FROM webhook_deliveries WHERE event_id = 'evt_0999999'")
            #expect(late.count == 1)
            #expect(try await app.rows("SELECT id FROM webhook_deliveries").count == 3001)
        }
    }

    /// An endpoint deleted or disabled after a pass read the endpoints, before its claiming write: the event still leaves
    /// the outbox with its other deliveries, and the gone endpoint gets none (a deleted endpoint's would stay pending).
    @Test(arguments: Engine.allCases)
    func anEndpointGoneBeforeTheClaimGetsNoDelivery(engine: Engine) async throws {
        try await TestApp.run(engine, configure: { $0.sweepIntervalSeconds = 0 }) { _, app in
            try await app.write(
                """
                INSERT INTO webhook_endpoints (id, url, events, balance_low_threshold, secret_sealed, created_at_ms, updated_at_ms)
                VALUES ('fan-a', 'https://example.com/a', 'tokens.spent', NULL, 'sealed', 0, 0),
                    ('fan-deleted', 'https://example.com/b', 'tokens.spent', NULL, 'sealed', 0, 0),
                    ('fan-disabled', 'https://example.com/c', 'tokens.spent', NULL, 'sealed', 0, 0)
                """)
            try await app.write(
                """
                INSERT INTO outbox_events (id, type, user_id, data, balance_before, balance_after, created_at_ms)
                VALUES ('evt_1', 'tokens.spent', 'fan-user', '{"amount":1}', NULL, NULL, 1000)
                """)
            let worker = app.webhookWorker(sender: WebhookReceiver.sender)
            let event = try #require(try await app.rows("SELECT * FROM outbox_events").first)
            let targets = ["fan-a", "fan-deleted", "fan-disabled"].map {
                WebhookWorker.Target(id: $0, events: ["tokens.spent"], threshold: nil, createdAt: Date(timeIntervalSince1970: 0))
            }
            let deliveries = try worker.fanOut(event: event, to: targets)
            #expect(deliveries.count == 3)
            try await app.write("UPDATE webhook_endpoints SET deleted_at_ms = 1 WHERE id = 'fan-deleted'")
            try await app.write("UPDATE webhook_endpoints SET disabled_at_ms = 1 WHERE id = 'fan-disabled'")
            try await worker.claim(WebhookWorker.Claim(eventIDs: ["evt_1"], deliveries: deliveries), now: app.clock.now())
            #expect(try await app.rows("SELECT id FROM outbox_events").isEmpty)
            #expect(try await app.rows("SELECT endpoint_id FROM webhook_deliveries").map { try $0.string("endpoint_id") } == ["fan-a"])
        }
    }
}
