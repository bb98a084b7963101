import Entitlements
import Foundation
import HTTPTypes
import HummingbirdTesting
import Storage
import TestSupport
import Testing

@testable import AccountAPI

/// Yearly plans receive their monthly tokens from the sweeper's drip, which reads only the subscriptions that are due,
/// in batches, so every yearly subscriber is served however many subscriptions there are (it once read the same
/// `LIMIT` rows every pass and starved the rest).
@Suite("Yearly drip")
struct YearlyDripHTTPTests {
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
