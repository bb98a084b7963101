import Auth
import Clock
import Foundation
import HTTPTypes
import HummingbirdTesting
import Storage
import TestSupport
import Testing

@testable import AccountAPI

/// The hot statements and the jobs' statements find their rows by an index on big tables: a database seeded by
/// `scripts/seed-scale` (30,000 users, 150,000 ledger entries, 1,000 expired holds), then the app's own flows over HTTP, and
/// `pg_stat_statements` (statements inside PL/pgSQL included) says how many buffers each statement touched per call.
/// A sequential scan of a seeded table touches hundreds; an index lookup a handful. A later change that loses an index
/// fails here with the statement's text.
@Suite("Query plans at scale")
struct QueryPlanTests {
    /// Buffers a statement may touch per call: a fixed allowance for an index descent and its rows, plus half a buffer
    /// per row a batch returns (a sweep's batch of 500 reads a few hundred). A scan of a seeded table reads more.
    static func blocksPerCallMax(rowsPerCall: Double) -> Double { 120 + 0.5 * rowsPerCall }

    @Test func everyStatementOfTheHotPathsAndJobsUsesAnIndexOnBigTables() async throws {
        try await TestApp.run(.postgres, configure: { $0.sweepIntervalSeconds = 0 }) { client, app in
            _ = try await app.rows("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            try Self.seed(url: app.handle.url)
            let largest = try await app.rows("SELECT relpages FROM pg_class WHERE relname = 'ledger_transfers'").first?.int("relpages") ?? 0
            #expect(largest > 1000, "the seeded table is big enough that a scan shows")

            // (Where a page 20,000 rows deep in the audit trail starts, found before the statements are counted.)
            let deep = try #require(try await app.rows("SELECT at_ms, id FROM audit_log ORDER BY at_ms DESC, id DESC OFFSET 20000 LIMIT 1").first)
            _ = try await app.rows("SELECT pg_stat_statements_reset()")
            let key = try await app.apiKey(["admin", "ledger:write", "ledger:read", "entitlements:read"])
            let token = try await client.signUpAndVerify(app, email: "plans@example.com")
            let user = try await app.userID(token: token)
            #expect(try await client.signIn("plans@example.com", "correct horse battery").status == .ok)
            let grant = #"{"userId":"\#(user)","amount":100,"bucket":"purchased","reason":"grant"}"#
            #expect(try await client.ledger("/api/ledger/grants", key: key, idempotencyKey: "g1", json: grant).status == .created)
            for index in 0..<20 {
                let spend = #"{"userId":"\#(user)","amount":1,"reason":"spend"}"#
                #expect(try await client.ledger("/api/ledger/spend", key: key, idempotencyKey: "s\(index)", json: spend).status == .ok)
            }
            let hold = try await client.ledger(
                "/api/ledger/holds", key: key, idempotencyKey: "h1", json: #"{"userId":"\#(user)","amount":2,"reason":"job"}"#)
            #expect(hold.status == .created)
            for path in [
                "/api/entitlements", "/api/user/token-balance", "/api/user/token-history?limit=2", "/api/profiles/available", "/api/user/me",
            ] {
                #expect(try await client.get(path, token: token).status == .ok, "\(path)")
            }
            for path in [
                "/api/admin/users?email=scale777@example.com", "/api/admin/users?limit=20", "/api/admin/users?query=scale12&limit=5",
                "/api/admin/users?query=scale1&cursor=scale19000@example.com&limit=5", "/api/admin/users/scale-123",
                "/api/admin/audit?userId=\(user)&limit=5", "/api/admin/users/scale-123/snapshot",
            ] {
                #expect(try await client.get(path, token: key).status == .ok, "\(path)")
            }
            // A page of the audit trail 20,000 rows deep costs what the first one does (keyset on (at_ms, id)).
            let page = try await client.get("/api/admin/audit?limit=5&cursor=\(try deep.int("at_ms"))_\(try deep.string("id"))", token: key)
            #expect(page.status == .ok)
            app.clock.advance(seconds: 3600)
            let swept = try await BackgroundSweeper(dependencies: app.dependencies, intervalSeconds: 5, logger: TestDatabase.logger).sweepOnce()
            // The seeded backlog of 1,000 expired holds drains in one pass, batch after batch.
            #expect(swept?.holds == 1000)
            // The seeded yearly subscriptions' second month is due: the drip starts it, reading only what is due.
            #expect((swept?.drips ?? 0) > 0)
            #expect(try await app.rows("SELECT id FROM ledger_holds WHERE status = 'pending' AND id LIKE 'scale-hold-%'").isEmpty)

            let statements = try await app.rows(
                """
                SELECT query, calls, (shared_blks_hit + shared_blks_read) / calls AS blocks, rows / calls AS rows_per_call FROM pg_stat_statements
                WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND calls > 0
                    AND query NOT LIKE '%pg_stat_statements%' ORDER BY blocks DESC
                """)
            #expect(statements.count > 30, "the flows ran their statements")
            for row in statements.prefix(8) {
                print(
                    "query-plan blocks=\(try row.int("blocks")) calls=\(try row.int("calls")) \(try row.string("query").prefix(90).replacingOccurrences(of: "\n", with: " "))"
                )
            }
            for row in statements {
                let blocks = Double(try row.int("blocks"))
                let query = try row.string("query")
                let allowed = Self.blocksPerCallMax(rowsPerCall: Double(try row.int("rows_per_call")))
                #expect(blocks <= allowed, "\(Int(blocks)) buffers per call (at most \(Int(allowed))): \(query)")
            }
        }
    }

    /// A session's minute-by-minute touch (its sliding idle expiry) stays on the row's own page, a HOT update that
    /// touches none of the table's indexes, even where the sessions around it filled the page when they were written
    /// (migration 0032). A row version moved to another page is what a full page makes.
    @Test func aSessionsTouchStaysOnItsPage() async throws {
        try await TestApp.run(.postgres, configure: { $0.sweepIntervalSeconds = 0 }) { client, app in
            #expect(
                try await app.rows("SELECT CAST(reloptions AS TEXT) AS options FROM pg_class WHERE oid = 'sessions'::regclass").first?.string(
                    "options") == "{fillfactor=80}")
            let token = try await client.signUpAndVerify(app, email: "touch@example.com")
            let user = try await app.userID(token: token)
            let block = "SELECT CAST((ctid::text::point)[0] AS BIGINT) AS block FROM sessions WHERE token_hash = ?"
            let hash = try AuthService.sessionTokenHash(token)
            let first = try #require(try await app.rows(block, [hash]).first?.int("block"))
            // Sessions written after it, more than fill its page.
            try await app.write(
                """
                INSERT INTO sessions (id, user_id, token_hash, created_at_ms, last_used_at_ms, expires_at_ms, authenticated_at_ms, user_agent, ip)
                SELECT 'filler-' || g, ?, md5('filler-' || g) || md5('more-' || g), 0, 0, 0, 0, repeat('agent ', 20), '192.0.2.1'
                FROM generate_series(1, 200) g
                """, [user])
            #expect(try await app.rows("SELECT id FROM sessions WHERE CAST((ctid::text::point)[0] AS BIGINT) = ?", [first]).count > 10)
            app.clock.advance(seconds: 120)
            #expect(try await client.get("/api/user/token-balance", token: token).status == .ok)
            let touched = try #require(
                try await app.rows(
                    "SELECT last_used_at_ms, CAST((ctid::text::point)[0] AS BIGINT) AS block FROM sessions WHERE token_hash = ?", [hash]
                ).first)
            #expect(try touched.int("last_used_at_ms") == app.clock.now().epochMilliseconds)
            #expect(try touched.int("block") == first)
        }
    }

    /// `scripts/seed-scale` into the test's database.
    static func seed(url: String) throws {
        let process = Process()
        process.executableURL = repositoryRoot.appendingPathComponent("scripts/seed-scale")
        process.environment = ProcessInfo.processInfo.environment.merging([
            "DATABASE_URL": url, "USERS": "30000", "TRANSFERS": "150000", "HOLDS": "1000",
        ]) { $1 }
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "scripts/seed-scale")
    }
}
