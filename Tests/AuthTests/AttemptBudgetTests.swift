import Foundation
import Logging
import Storage
import TestSupport
import Testing

@testable import Auth

@Suite("Attempt budgets on both engines")
struct AttemptBudgetTests {
    static let start = Date(timeIntervalSince1970: 1_800_000_000)

    static func reserve(_ db: any Database, _ key: String, _ rule: AttemptRule, at now: Date) async throws -> AttemptReservation {
        try await db.transaction(logger: TestDatabase.logger) { try await AttemptBudget.reserve($0, key: key, rule: rule, now: now) }
    }

    static func migrated(_ engine: Engine, _ body: @Sendable @escaping (any Database) async throws -> Void) async throws {
        try await TestDatabase.with(engine) { db, _ in
            _ = try await db.migrate(engine.migrations, logger: TestDatabase.logger)
            try await body(db)
        }
    }

    /// Per-client budgets key an IPv6 client by its /64 (all of it is one subscriber's), an IPv4 client by its address;
    /// an IPv4-mapped IPv6 address is its IPv4 address.
    @Test func clientNetworksKeyIPv6ByItsSlash64() {
        let one = BudgetKeys.clientNetwork("2001:db8:1:2:aaaa::1")
        #expect(one == BudgetKeys.clientNetwork("2001:0db8:0001:0002:ffff:ffff:ffff:fffe") && one == "2001:db8:1:2::/64")
        #expect(one != BudgetKeys.clientNetwork("2001:db8:1:3::1"))
        #expect(BudgetKeys.clientNetwork("203.0.113.7") == "203.0.113.7" && BudgetKeys.clientNetwork("203.0.113.8") != "203.0.113.7")
        #expect(BudgetKeys.clientNetwork("::ffff:203.0.113.7") == "203.0.113.7")
        #expect(BudgetKeys.clientNetwork("unknown") == "unknown")
    }

    /// Many tasks, one budget: exactly `limit` attempts are reserved, however the transactions interleave. As many racers
    /// as the pool has connections, so every one is in flight at once and none waits for a connection behind the
    /// row lock: with 48, inside the full suite on two cores, the last in the pool's queue could outwait its lease timeout.
    @Test(arguments: TestDatabase.engines)
    func parallelReservationsNeverExceedTheLimit(engine: Engine) async throws {
        let racers = PostgresDatabase.maximumConnections
        try await Self.migrated(engine) { (db: any Database) async throws in
            for rule in [
                AttemptRule(limit: 6, window: .idle(seconds: 900), lockSeconds: 900),
                AttemptRule(limit: 4, window: .fixed(seconds: 60)),
            ] {
                let key = "parallel:\(rule.limit)"
                let outcomes = try await withThrowingTaskGroup(of: AttemptReservation.self) { group in
                    for _ in 0..<racers { group.addTask { try await Self.reserve(db, key, rule, at: Self.start) } }
                    return try await group.reduce(into: [AttemptReservation]()) { $0.append($1) }
                }
                let reserved = outcomes.compactMap { if case .reserved(let n) = $0 { n } else { nil } }
                #expect(reserved.sorted() == Array(1...rule.limit), "each slot once: \(reserved.sorted())")
                #expect(outcomes.count - reserved.count == racers - rule.limit)
                let locked = outcomes.contains { if case .refused(_, true) = $0 { true } else { false } }
                #expect(locked == (rule.lockSeconds > 0))
            }
        }
    }

    @Test(arguments: TestDatabase.engines)
    func delaysLocksAndWindows(engine: Engine) async throws {
        try await Self.migrated(engine) { (db: any Database) async throws in
            let rule = AttemptRule(limit: 4, window: .idle(seconds: 600), lockSeconds: 300, delays: [2: 10, 3: 20])
            let t = Self.start
            #expect(try await Self.reserve(db, "k", rule, at: t) == AttemptReservation.reserved(attempt: 1))
            #expect(try await Self.reserve(db, "k", rule, at: t) == AttemptReservation.reserved(attempt: 2))
            #expect(
                try await Self.reserve(db, "k", rule, at: t.addingTimeInterval(4)) == AttemptReservation.refused(retryAfterSeconds: 6, locked: false))
            #expect(try await Self.reserve(db, "k", rule, at: t.addingTimeInterval(10)) == AttemptReservation.reserved(attempt: 3))
            #expect(
                try await Self.reserve(db, "k", rule, at: t.addingTimeInterval(29)) == AttemptReservation.refused(retryAfterSeconds: 1, locked: false)
            )
            #expect(
                try await Self.reserve(db, "k", rule, at: t.addingTimeInterval(30)) == AttemptReservation.reserved(attempt: 4),
                "the limit-th attempt locks")
            #expect(
                try await Self.reserve(db, "k", rule, at: t.addingTimeInterval(31))
                    == AttemptReservation.refused(retryAfterSeconds: 299, locked: true))
            // A refusal never counts, so the lock's end is not pushed back by attempts during it.
            #expect(
                try await Self.reserve(db, "k", rule, at: t.addingTimeInterval(329)) == AttemptReservation.refused(retryAfterSeconds: 1, locked: true)
            )
            #expect(
                try await Self.reserve(db, "k", rule, at: t.addingTimeInterval(330)) == AttemptReservation.reserved(attempt: 1),
                "a fresh count after the lock")
            // Idle for the window: the count starts again.
            #expect(try await Self.reserve(db, "k", rule, at: t.addingTimeInterval(930)) == AttemptReservation.reserved(attempt: 1))
            // A fixed window: `limit` per window, then refused until the window (not the last attempt) ends.
            let rate = AttemptRule(limit: 2, window: .fixed(seconds: 60))
            #expect(try await Self.reserve(db, "r", rate, at: t) == AttemptReservation.reserved(attempt: 1))
            #expect(try await Self.reserve(db, "r", rate, at: t.addingTimeInterval(50)) == AttemptReservation.reserved(attempt: 2))
            #expect(
                try await Self.reserve(db, "r", rate, at: t.addingTimeInterval(55)) == AttemptReservation.refused(retryAfterSeconds: 5, locked: false)
            )
            #expect(try await Self.reserve(db, "r", rate, at: t.addingTimeInterval(60)) == AttemptReservation.reserved(attempt: 1))
        }
    }

    @Test(arguments: TestDatabase.engines)
    func successRefundAndPeek(engine: Engine) async throws {
        try await Self.migrated(engine) { (db: any Database) async throws in
            let rule = AttemptRule(limit: 3, window: .idle(seconds: 600), lockSeconds: 300)
            let t = Self.start
            let log = TestDatabase.logger
            _ = try await Self.reserve(db, "s", rule, at: t)
            _ = try await Self.reserve(db, "s", rule, at: t)
            let peeked = try await db.transaction(logger: log) { try await AttemptBudget.peek($0, key: "s", rule: rule, now: t) }
            #expect(peeked.remaining == 1 && peeked.refusal == nil)
            // A success while attempts are in flight starts the budget again.
            try await db.transaction(logger: log) { try await AttemptBudget.succeeded($0, key: "s", attempt: 1, now: t) }
            #expect(try await Self.reserve(db, "s", rule, at: t) == AttemptReservation.reserved(attempt: 1))
            // A lock set by a later attempt survives an earlier attempt's success; the locking attempt itself may clear it.
            _ = try await Self.reserve(db, "s", rule, at: t)
            #expect(try await Self.reserve(db, "s", rule, at: t) == AttemptReservation.reserved(attempt: 3))
            try await db.transaction(logger: log) { try await AttemptBudget.succeeded($0, key: "s", attempt: 2, now: t) }
            #expect(try await Self.reserve(db, "s", rule, at: t) == AttemptReservation.refused(retryAfterSeconds: 300, locked: true))
            let lockedPeek = try await db.transaction(logger: log) { try await AttemptBudget.peek($0, key: "s", rule: rule, now: t) }
            #expect(lockedPeek.remaining == 0 && lockedPeek.refusal == AttemptReservation.refused(retryAfterSeconds: 300, locked: true))
            // A refund never lifts a lock…
            try await db.transaction(logger: log) { try await AttemptBudget.refund($0, key: "s") }
            #expect(try await Self.reserve(db, "s", rule, at: t) == AttemptReservation.refused(retryAfterSeconds: 300, locked: true))
            try await db.transaction(logger: log) { try await AttemptBudget.succeeded($0, key: "s", attempt: 3, now: t) }
            #expect(try await Self.reserve(db, "s", rule, at: t) == AttemptReservation.reserved(attempt: 1))
            // …but gives an unlocked attempt back.
            try await db.transaction(logger: log) { try await AttemptBudget.refund($0, key: "s") }
            #expect(try await Self.reserve(db, "s", rule, at: t) == AttemptReservation.reserved(attempt: 1))
            // Idle budgets are purged, locked ones kept until their lock ends.
            _ = try await Self.reserve(db, "old", rule, at: t.addingTimeInterval(-7200))
            let purged = try await db.transaction(logger: log) {
                try await AttemptBudget.purge($0, idleBefore: t.addingTimeInterval(-3600), now: t, limit: 100)
            }
            #expect(purged == 1)
        }
    }
}
