import Clock
import Entitlements
import Foundation
import HTTPTypes
import HummingbirdTesting
import Ledger
import Storage
import TestSupport
import Testing

@testable import AccountAPI

/// The background sweeper's jobs serve every row however many there are: expired holds and the yearly drip drain a
/// backlog batch after batch in one pass, and the drip reads only the subscriptions that are due (it once read the same
/// `LIMIT` rows every pass and starved the rest).
@Suite("Sweeper backlogs")
struct SweeperBacklogHTTPTests {
    @Test(arguments: TestDatabase.engines)
    func aBacklogOfExpiredHoldsDrainsInOnePass(engine: Engine) async throws {
        try await TestApp.run(engine, configure: { $0.sweepIntervalSeconds = 0 }) { client, app in
            // 700 users, each with one purchased token held by a hold that expires in a minute: more than one batch (500).
            let count = 700
            let now = app.clock.now()
            try await app.dependencies.database.transaction(logger: TestDatabase.logger) { tx in
                for n in 0..<count {
                    let user = "backlog-\(n)"
                    try await tx.query(
                        """
                        INSERT INTO users (id, email, name, email_verified, role, prompt_enhancement_enabled, created_at_ms, updated_at_ms)
                        VALUES (?, ?, 'Backlog', ?, 'user', ?, ?, ?)
                        """, [user, "\(user)@example.com", true, true, now, now])
                    try await tx.query(
                        "INSERT INTO ledger_accounts (id, user_id, bucket, balance, created_at_ms) VALUES (?, ?, 'purchased', 0, ?)",
                        ["user:\(user):purchased", user, now])
                    try await tx.query(
                        "INSERT INTO ledger_holds (id, user_id, amount, status, reason, expires_at_ms, created_at_ms) VALUES (?, ?, 1, 'pending', 'job', ?, ?)",
                        ["hold-\(n)", user, now.addingTimeInterval(60), now])
                    try await tx.query(
                        "INSERT INTO ledger_hold_parts (hold_id, part, bucket, lot_id, amount) VALUES (?, 0, 'purchased', NULL, 1)", ["hold-\(n)"])
                    for (id, from, to, amount, reason, hold) in [
                        ("grant-\(n)", "system:issuance", "user:\(user):purchased", Int64(1), "purchase", String?.none),
                        ("held-\(n)", "user:\(user):purchased", "system:holds", Int64(-1), "hold", "hold-\(n)"),
                    ] {
                        try await tx.query(
                            """
                            INSERT INTO ledger_transfers (id, operation_id, debit_account_id, credit_account_id, amount, reason, user_id, user_amount,
                                user_bucket, user_balance_after, hold_id, created_at_ms) VALUES (?, ?, ?, ?, 1, ?, ?, ?, 'purchased', ?, ?, ?)
                            """, [id, id, from, to, reason, user, amount, amount > 0 ? Int64(1) : nil, hold, now])
                    }
                }
            }
            #expect(try await app.dependencies.ledger.verify(logger: TestDatabase.logger).ok)
            app.clock.advance(seconds: 120)
            let swept = try await BackgroundSweeper(dependencies: app.dependencies, intervalSeconds: 5, logger: TestDatabase.logger).sweepOnce()
            #expect(swept?.holds == count)
            #expect(try await app.rows("SELECT id FROM ledger_holds WHERE status = 'pending'").isEmpty)
            #expect(try await app.rows("SELECT id FROM ledger_accounts WHERE id LIKE 'user:backlog-%' AND balance = 1").count == count)
            #expect(try await app.dependencies.ledger.verify(logger: TestDatabase.logger).ok)
            _ = client
        }
    }

    @Test(arguments: TestDatabase.engines)
    func everyYearlySubscriberGetsEachMonthInBatches(engine: Engine) async throws {
        try await TestApp.run(engine, configure: { $0.sweepIntervalSeconds = 0 }) { client, app in
            let admin = try await app.apiKey(["admin"])
            let yearEnd = ISO8601DateFormatter().string(from: app.clock.now().addingTimeInterval(365 * 86400))
            var users: [String: String] = [:]
            for (name, plan) in [("y1", "basic_yearly"), ("y2", "pro_yearly"), ("y3", "basic_yearly"), ("m1", "basic_monthly"), ("e1", "pro_yearly")]
            {
                let token = try await client.signUpAndVerify(app, email: "\(name)@example.com")
                let user = try await app.userID(token: token)
                users[name] = user
                let body = plan.hasSuffix("yearly") ? #"{"planId":"\#(plan)","periodEnd":"\#(yearEnd)"}"# : #"{"planId":"\#(plan)"}"#
                #expect(try await client.send(.post, "/api/admin/users/\(user)/subscription", token: admin, json: body).status == .ok)
            }
            #expect(try await client.send(.delete, "/api/admin/users/\(try #require(users["e1"]))/subscription", token: admin).status == .noContent)
            let drip = { try await app.dependencies.subscriptions.dripYearlyPlans(limit: 2, logger: TestDatabase.logger) }
            func periods(_ name: String) async throws -> Int {
                try await app.rows("SELECT period_key FROM ledger_period_grants WHERE user_id = ?", [try #require(users[name])]).count
            }
            func nextDrip(_ name: String) async throws -> Date? {
                try await app.rows("SELECT next_drip_at_ms FROM subscriptions WHERE user_id = ?", [try #require(users[name])]).first?
                    .optionalDate("next_drip_at_ms")
            }

            // Month 0 came with the comps; the drip starts nothing, two rows a pass, and schedules each: the yearly ones
            // for next month, the monthly and the ended one for never.
            for _ in 0..<3 { #expect(try await drip() == 0) }
            #expect(try await drip() == 0)
            let start = try #require(try await app.rows("SELECT current_period_start_ms FROM subscriptions WHERE user_id = ?", [users["y1"]]).first)
                .date("current_period_start_ms")
            let nextMonth = try #require(Calendar(identifier: .gregorian).date(byAdding: .month, value: 1, to: start))
            #expect(try await nextDrip("y1") == nextMonth)
            #expect(try await nextDrip("m1") == nil)
            #expect(try await nextDrip("e1") == nil)

            // A month on: all three yearly subscribers get month 1, two a pass; none twice; nothing for the others.
            app.clock.advance(seconds: 32 * 86400)
            #expect(try await drip() == 2)
            #expect(try await drip() == 1)
            #expect(try await drip() == 0)
            for name in ["y1", "y2", "y3"] { #expect(try await periods(name) == 2) }
            #expect(try await periods("m1") == 1)
            #expect(try await periods("e1") == 1)
            let monthTwo = try #require(Calendar(identifier: .gregorian).date(byAdding: .month, value: 2, to: start))
            #expect(try await nextDrip("y2") == monthTwo)
            // A backlog drains in one call, batch after batch while they come back full.
            app.clock.advance(seconds: 31 * 86400)
            #expect(try await app.dependencies.subscriptions.dripYearlyPlans(limit: 2, batches: 5, logger: TestDatabase.logger) == 3)
            for name in ["y1", "y2", "y3"] { #expect(try await periods(name) == 3) }

            // A write to a subscription makes it due again: the monthly subscriber moves to a yearly plan (its comp starts
            // that period's month 0) and is scheduled by the next pass.
            #expect(
                try await client.send(
                    .post, "/api/admin/users/\(try #require(users["m1"]))/subscription", token: admin,
                    json:
                        #"{"planId":"max_yearly","periodEnd":"\#(ISO8601DateFormatter().string(from: app.clock.now().addingTimeInterval(300 * 86400)))"}"#
                ).status == .ok)
            #expect(try await nextDrip("m1") == Date(timeIntervalSince1970: 0))
            #expect(try await drip() == 0)
            #expect(try await nextDrip("m1").map { $0 > app.clock.now() } == true)
            #expect(try await periods("m1") == 2)
        }
    }
}
