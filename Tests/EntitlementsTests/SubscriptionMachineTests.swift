import Auth
import Clock
import Entitlements
import Foundation
import Ledger
import Storage
import TestSupport
import Testing

@Suite("Subscription state machine")
struct SubscriptionMachineTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    struct World {
        let db: any Database
        let clock: ManualTimeSource
        let ledger: Ledger
        let store: SubscriptionStore
        let machine: SubscriptionMachine
        var t0: Date { clock.now() }

        func apply(_ id: String, _ event: SubscriptionEvent, at: Date? = nil, user: String = "u") async throws -> EventOutcome {
            try await db.transaction(logger: TestDatabase.logger) { tx in
                try await machine.apply(tx, provider: .apple, eventID: id, userID: user, occurredAt: at ?? clock.now(), event: event).outcome
            }
        }
        /// A pro monthly subscription started now (event "s"); its start.
        func startPro() async throws -> Date {
            let start = t0
            _ = try await apply("s", .start(planID: "pro_monthly", periodStart: start, periodEnd: nil, trial: false, willRenew: true))
            return start
        }
        func plan(_ user: String = "u") async throws -> String {
            try await db.withConnection(logger: TestDatabase.logger) { tx in try await store.currentPlan(userID: user, now: clock.now(), tx).id }
        }
        func subscription(_ user: String = "u") async throws -> Subscription? {
            try await db.withConnection(logger: TestDatabase.logger) { tx in try await store.subscription(userID: user, tx) }
        }
        func tokens(_ user: String = "u") async throws -> BucketBalances {
            try await db.transaction(logger: TestDatabase.logger) { tx in try await ledger.balances(tx, userID: user) }
        }
    }

    static func world(_ db: any Database) async throws -> World {
        _ = try await db.migrate(db.engine.migrations, logger: TestDatabase.logger)
        try await db.transaction(logger: TestDatabase.logger) { tx in
            try await tx.query(
                "INSERT INTO users (id, email, name, email_verified, role, prompt_enhancement_enabled, created_at_ms, updated_at_ms) VALUES ('u', 'u@x.com', 'U', ?, 'user', ?, 0, 0)",
                [true, true])
        }
        let clock = ManualTimeSource()
        let ledger = Ledger(clock: clock)
        let store = SubscriptionStore(catalog: try PlanCatalog.load(path: root.appendingPathComponent("plans.json").path))
        return World(db: db, clock: clock, ledger: ledger, store: store, machine: SubscriptionMachine(store: store, ledger: ledger, clock: clock))
    }

    @Test(arguments: TestDatabase.engines)
    func startTrialRenewWithDowngradeAndDuplicates(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let w = try await Self.world(db)
            #expect(try await w.plan() == "free")
            #expect(
                try await w.apply("e1", .start(planID: "basic_monthly", periodStart: w.t0, periodEnd: nil, trial: true, willRenew: true)) == .applied)
            #expect(
                try await w.apply("e1", .start(planID: "basic_monthly", periodStart: w.t0, periodEnd: nil, trial: true, willRenew: true))
                    == .duplicate)
            let trial = try #require(try await w.subscription())
            #expect(trial.status == .trialing && trial.currentPeriodEnd.timeIntervalSince(w.t0) == 7 * 86400)
            #expect(try await w.tokens().subscriptionTokens == 50)
            // Upgrade now, within the period (no new period start): Max from now, the period topped up to Max's 400.
            w.clock.advance(seconds: 86400)
            #expect(try await w.apply("e2", .changePlanNow(planID: "max_monthly", periodEnd: nil)) == .applied)
            #expect(try await w.plan() == "max_monthly")
            #expect(try await w.tokens().subscriptionTokens == 400)
            // Downgrade at renewal: nothing changes until the renewal, which then starts a Basic period.
            #expect(try await w.apply("e3", .changePlanAtRenewal(planID: "basic_monthly")) == .applied)
            #expect(try await w.plan() == "max_monthly")
            #expect(try await w.subscription()?.pendingPlanID == "basic_monthly")
            w.clock.advance(seconds: 30 * 86400)
            let start = w.clock.now()
            #expect(try await w.apply("e4", .renew(periodStart: start, periodEnd: start.addingTimeInterval(30 * 86400))) == .applied)
            #expect(try await w.apply("e4", .renew(periodStart: start, periodEnd: start.addingTimeInterval(30 * 86400))) == .duplicate)
            #expect(try await w.plan() == "basic_monthly")
            #expect(try await w.subscription()?.pendingPlanID == nil)
            // Rollover: 400 subscription tokens, Basic keeps 50, then grants 50.
            #expect(try await w.tokens().subscriptionTokens == 100)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func cancelGracePastDueAndExpiry(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let w = try await Self.world(db)
            let t0 = w.t0
            let end = t0.addingTimeInterval(30 * 86400)
            _ = try await w.apply("a", .start(planID: "pro_monthly", periodStart: t0, periodEnd: end, trial: false, willRenew: true))
            #expect(try await w.apply("b", .setWillRenew(false)) == .applied)
            #expect(try await w.subscription()?.willRenew == false)
            #expect(try await w.plan() == "pro_monthly")
            w.clock.set(end.addingTimeInterval(1))
            #expect(try await w.plan() == "free")  // canceled at period end: access ended with the period
            #expect(try await w.apply("c", .grace(until: end.addingTimeInterval(16 * 86400))) == .applied)
            #expect(try await w.plan() == "pro_monthly")
            #expect(try await w.subscription()?.status == .grace)
            #expect(try await w.apply("d", .pastDue) == .applied)
            #expect(try await w.plan() == "free")
            #expect(try await w.apply("e", .expire) == .applied)
            #expect(try await w.subscription()?.status == .expired)
            #expect(try await w.plan() == "free")
            // An event older than the newest applied one is recorded but changes nothing.
            #expect(try await w.apply("f", .setWillRenew(true), at: t0) == .stale)
            #expect(try await w.subscription()?.willRenew == false)
            #expect(try await w.apply("g", .renew(periodStart: w.clock.now(), periodEnd: w.clock.now()), user: "nobody") == .ignored)
            let outcomes = try await db.withConnection(logger: TestDatabase.logger) { tx in
                try await tx.query("SELECT event_id, outcome FROM subscription_events ORDER BY event_id").map {
                    "\(try $0.string("event_id"))=\(try $0.string("outcome"))"
                }
            }
            #expect(outcomes == ["a=applied", "b=applied", "c=applied", "d=applied", "e=applied", "f=stale", "g=ignored"])
        }
    }

    @Test(arguments: TestDatabase.engines)
    func refundClawsBackWithoutGoingNegativeAndReversalRestores(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let w = try await Self.world(db)
            _ = try await w.apply("s", .start(planID: "pro_monthly", periodStart: w.t0, periodEnd: nil, trial: false, willRenew: true))
            _ = try await db.transaction(logger: TestDatabase.logger) { tx in
                try await w.ledger.spend(tx, userID: "u", amountTokens: 100, reason: "generation")
            }
            #expect(try await w.tokens().subscriptionTokens == 50)
            #expect(try await w.apply("r", .refund(periodKey: nil)) == .applied)
            #expect(try await w.tokens().subscriptionTokens == 0)
            #expect(try await w.plan() == "free")
            let detail = try await db.withConnection(logger: TestDatabase.logger) { tx in
                try await tx.first("SELECT detail FROM subscription_events WHERE event_id = 'r'")?.optionalString("detail")
            }
            #expect(detail == "clawed 50 shortfall 100")
            #expect(try await w.apply("r", .refund(periodKey: nil)) == .duplicate)
            #expect(try await w.apply("rr", .reverseRefund(periodKey: nil, periodEnd: nil)) == .applied)
            #expect(try await w.tokens().subscriptionTokens == 50)
            #expect(try await w.plan() == "pro_monthly")
            #expect(try await db.withConnection(logger: TestDatabase.logger) { try await w.ledger.verify($0) }.ok)
        }
    }

    /// A refund names its period: an earlier one's tokens are taken back and the current period stays; each period is
    /// refunded once and reversed once, whatever the event ids (a refund and a dispute of one payment); a reversal that
    /// arrives before its refund makes the refund take nothing.
    @Test(arguments: TestDatabase.engines)
    func refundsNameTheirPeriodAndCountOnce(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let w = try await Self.world(db)
            let first = w.t0
            _ = try await w.apply("s", .start(planID: "pro_monthly", periodStart: first, periodEnd: nil, trial: false, willRenew: true))
            w.clock.advance(seconds: 31 * 86_400)
            let second = w.clock.now()
            #expect(try await w.apply("n", .renew(periodStart: second, periodEnd: second.addingTimeInterval(30 * 86_400))) == .applied)
            #expect(try await w.tokens().subscriptionTokens == 300)
            let firstKey = SubscriptionMachine.periodKey(first)
            #expect(try await w.apply("r1", .refund(periodKey: firstKey)) == .applied)
            #expect(try await w.tokens().subscriptionTokens == 150)
            #expect(try await w.plan() == "pro_monthly")
            #expect(try await w.apply("r2", .refund(periodKey: firstKey)) == .ignored)
            #expect(try await w.tokens().subscriptionTokens == 150)
            #expect(try await w.apply("v1", .reverseRefund(periodKey: firstKey, periodEnd: nil)) == .applied)
            #expect(try await w.apply("v2", .reverseRefund(periodKey: firstKey, periodEnd: nil)) == .ignored)
            #expect(try await w.tokens().subscriptionTokens == 300)
            // The reversal of the current period's refund arrives first: the refund, arriving after, takes nothing.
            let secondKey = SubscriptionMachine.periodKey(second)
            #expect(try await w.apply("v3", .reverseRefund(periodKey: secondKey, periodEnd: nil)) == .applied)
            #expect(try await w.apply("r3", .refund(periodKey: secondKey)) == .ignored)
            #expect(try await w.tokens().subscriptionTokens == 300)
            #expect(try await w.plan() == "pro_monthly")
            #expect(try await db.withConnection(logger: TestDatabase.logger) { try await w.ledger.verify($0) }.ok)
        }
    }

    /// A refund applied before migration 0037 (which clawed the period current then) is carried over: the period and its
    /// months are marked refunded, what it took on the period's own row (so a reversal gives back that, once, and a second
    /// refund of the period takes nothing more); an earlier period is left alone.
    @Test(arguments: TestDatabase.engines)
    func refundsFromBeforeTheMigrationAreCarriedOver(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            _ = try await db.migrate(db.engine.migrations.filter { $0.version < 37 }, logger: TestDatabase.logger)
            let start: Int64 = 1_700_000_000_000
            try await db.transaction(logger: TestDatabase.logger) { tx in
                try await tx.query(
                    "INSERT INTO users (id, email, name, email_verified, role, prompt_enhancement_enabled, created_at_ms, updated_at_ms) VALUES ('u', 'u@x.com', 'U', ?, 'user', ?, 0, 0)",
                    [true, true])
                for (id, kind, at, clawed) in [("old", "refund", start + 10, Int64(120)), ("p-u", "refund", start + 5, Int64(7))] {
                    try await tx.query(
                        """
                        INSERT INTO subscription_events (provider, event_id, user_id, kind, occurred_at_ms, outcome, detail, recorded_at_ms, clawed_tokens)
                        VALUES ('apple', ?, 'u', ?, ?, 'applied', 'old', ?, ?)
                        """, [id, kind, at, at, clawed])
                }
                try await tx.query(
                    """
                    INSERT INTO subscriptions (user_id, plan_id, status, provider, current_period_start_ms, current_period_end_ms, will_renew, updated_at_ms)
                    VALUES ('u', 'pro_monthly', 'expired', 'apple', ?, ?, ?, 0)
                    """, [start, start + 10, false])
                for key in ["period:\(start)", "period:\(start):month:1", "period:\(start - 1)"] {
                    try await tx.query(
                        "INSERT INTO ledger_period_grants (user_id, period_key, plan_id, granted, expired, created_at_ms) VALUES ('u', ?, 'pro_monthly', 150, 0, 0)",
                        [key])
                }
            }
            _ = try await db.migrate(db.engine.migrations, logger: TestDatabase.logger)
            let rows = try await db.withConnection(logger: TestDatabase.logger) { tx in
                try await tx.query("SELECT period_key, refund, clawed FROM ledger_period_grants ORDER BY period_key").map {
                    "\(try $0.string("period_key"))=\(try $0.string("refund"))/\(try $0.int("clawed"))"
                }
            }
            #expect(rows == ["period:\(start - 1)=none/0", "period:\(start)=refunded/120", "period:\(start):month:1=refunded/0"])
        }
    }

    /// A refund that arrives before its period (a renewal delivered late) keeps the period from granting tokens or access
    /// when it comes; a late reversal gives the tokens back but leaves access as a newer expiry left it.
    @Test(arguments: TestDatabase.engines)
    func refundsAndReversalsOutOfOrderChangeOnlyWhatTheyMay(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let w = try await Self.world(db)
            let start = try await w.startPro()
            let day: TimeInterval = 86_400
            let next = start.addingTimeInterval(30 * day)
            #expect(
                try await w.apply("r-next", .refund(periodKey: SubscriptionMachine.periodKey(next)), at: start.addingTimeInterval(60)) == .applied)
            #expect(try await w.tokens().subscriptionTokens == 150)
            #expect(try await w.apply("n", .renew(periodStart: next, periodEnd: next.addingTimeInterval(30 * day)), at: next) == .ignored)
            #expect(try await w.tokens().subscriptionTokens == 150)
            #expect(try await w.subscription()?.currentPeriodStart.epochMilliseconds == start.epochMilliseconds)
            // The current period: refunded, then expired by a newer event, then the refund's reversal arrives late.
            let key = SubscriptionMachine.periodKey(start)
            #expect(try await w.apply("r", .refund(periodKey: key), at: start.addingTimeInterval(100)) == .applied)
            #expect(try await w.apply("x", .expire, at: start.addingTimeInterval(300)) == .applied)
            #expect(try await w.apply("v", .reverseRefund(periodKey: key, periodEnd: nil), at: start.addingTimeInterval(200)) == .stale)
            #expect(try await w.tokens().subscriptionTokens == 150)
            #expect(try await w.plan() == "free")
            #expect(try await db.withConnection(logger: TestDatabase.logger) { try await w.ledger.verify($0) }.ok)
        }
    }

    /// A refund of a purchase not verified yet (no subscription) still marks its period: the purchase, verified later
    /// from a transaction signed before the refund, grants nothing. Once the refund is reversed, it grants.
    @Test(arguments: TestDatabase.engines)
    func aRefundBeforeAnySubscriptionKeepsItsPeriodFromGranting(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let w = try await Self.world(db)
            let start = w.t0
            let key = SubscriptionMachine.periodKey(start)
            #expect(try await w.apply("r", .refund(periodKey: key)) == .applied)
            let start1 = SubscriptionEvent.start(planID: "pro_monthly", periodStart: start, periodEnd: nil, trial: false, willRenew: true)
            #expect(try await w.apply("s1", start1) == .ignored)
            #expect(try await w.tokens().subscriptionTokens == 0)
            #expect(try await w.plan() == "free")
            #expect(try await w.apply("v", .reverseRefund(periodKey: key, periodEnd: nil)) == .applied)
            // The same purchase event, delivered again (reconciliation), now applies: the ignored delivery did not use it up.
            #expect(try await w.apply("s1", start1) == .applied)
            #expect(try await w.tokens().subscriptionTokens == 150)
            #expect(try await w.plan() == "pro_monthly")
            #expect(try await db.withConnection(logger: TestDatabase.logger) { try await w.ledger.verify($0) }.ok)
        }
    }

    /// A refund of an earlier period does not become the newest event: the current subscription's own event signed
    /// before it still applies (before, it arrived stale and the renewal's period never became current).
    @Test(arguments: TestDatabase.engines)
    func aRefundOfAnEarlierPeriodDoesNotMakeTheCurrentOnesEventsStale(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let w = try await Self.world(db)
            let start = try await w.startPro()
            let day: TimeInterval = 86_400
            let next = start.addingTimeInterval(30 * day)
            w.clock.set(next.addingTimeInterval(60))
            let old = SubscriptionMachine.periodKey(start.addingTimeInterval(-30 * day))
            #expect(try await w.apply("r", .refund(periodKey: old), at: next.addingTimeInterval(30)) == .applied)
            #expect(try await w.apply("n", .renew(periodStart: next, periodEnd: next.addingTimeInterval(30 * day)), at: next) == .applied)
            #expect(try await w.subscription()?.currentPeriodStart.epochMilliseconds == next.epochMilliseconds)
        }
    }

    /// A renewal that arrives late (older than a newer toggle) for a period whose refund came first is not used up
    /// either: after the reversal, the same renewal grants. A late reversal restores access although a refund of another
    /// period came after it (that refund changed no state).
    @Test(arguments: TestDatabase.engines)
    func lateEventsAroundARefundFirstPeriod(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let w = try await Self.world(db)
            let start = try await w.startPro()
            let day: TimeInterval = 86_400
            let next = start.addingTimeInterval(30 * day)
            let nextKey = SubscriptionMachine.periodKey(next)
            let renewal = SubscriptionEvent.renew(periodStart: next, periodEnd: next.addingTimeInterval(30 * day))
            #expect(try await w.apply("r", .refund(periodKey: nextKey), at: start.addingTimeInterval(60)) == .applied)
            #expect(try await w.apply("t", .setWillRenew(false), at: start.addingTimeInterval(100)) == .applied)
            #expect(try await w.apply("n", renewal, at: start.addingTimeInterval(80)) == .stale)
            #expect(try await w.apply("v", .reverseRefund(periodKey: nextKey, periodEnd: nil), at: start.addingTimeInterval(90)) == .stale)
            #expect(try await w.apply("n", renewal, at: start.addingTimeInterval(80)) == .stale)
            #expect(try await w.tokens().subscriptionTokens == 300)
            // The current period refunded (t110), an older period refunded after it (t130), a toggle (t140); the current
            // refund's reversal, signed at t120, arrives last: access returns.
            let key = SubscriptionMachine.periodKey(start)
            #expect(try await w.apply("r1", .refund(periodKey: key), at: start.addingTimeInterval(110)) == .applied)
            #expect(try await w.plan() == "free")
            let older = SubscriptionMachine.periodKey(start.addingTimeInterval(-30 * day))
            #expect(try await w.apply("r0", .refund(periodKey: older), at: start.addingTimeInterval(130)) == .applied)
            #expect(try await w.apply("t2", .setWillRenew(true), at: start.addingTimeInterval(140)) == .applied)
            #expect(try await w.apply("v1", .reverseRefund(periodKey: key, periodEnd: nil), at: start.addingTimeInterval(120)) == .stale)
            #expect(try await w.plan() == "pro_monthly")
            #expect(try await db.withConnection(logger: TestDatabase.logger) { try await w.ledger.verify($0) }.ok)
        }
    }

    /// A refund older than the account's newest event (a renewal-status toggle after it) is still a refund: before, it
    /// was recorded as stale and lost, and access and the period's tokens stayed. Its late reversal gives both back.
    @Test(arguments: TestDatabase.engines)
    func aLateRefundOfTheCurrentPeriodStillEndsIt(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let w = try await Self.world(db)
            let start = try await w.startPro()
            #expect(try await w.apply("t", .setWillRenew(false), at: start.addingTimeInterval(20)) == .applied)
            #expect(try await w.apply("r", .refund(periodKey: SubscriptionMachine.periodKey(start)), at: start.addingTimeInterval(10)) == .stale)
            #expect(try await w.tokens().subscriptionTokens == 0)
            #expect(try await w.plan() == "free")
            let detail = try await db.withConnection(logger: TestDatabase.logger) { tx in
                try await tx.first("SELECT detail FROM subscription_events WHERE event_id = 'r'")?.optionalString("detail")
            }
            #expect(detail == "late refund: clawed 150 shortfall 0")
            // Its reversal, late too (still older than the toggle): tokens and access return, as nothing newer ended it.
            #expect(
                try await w.apply(
                    "v", .reverseRefund(periodKey: SubscriptionMachine.periodKey(start), periodEnd: nil), at: start.addingTimeInterval(15))
                    == .stale)
            #expect(try await w.tokens().subscriptionTokens == 150)
            #expect(try await w.plan() == "pro_monthly")
        }
    }

    /// A renewal of an earlier month repaired later (reconciliation applies it with a new `at`) grants that month's tokens
    /// once and keeps the current period: before, it moved the subscription back to the old month, whose end had passed.
    @Test(arguments: TestDatabase.engines)
    func aRepairedEarlierRenewalKeepsTheCurrentPeriod(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let w = try await Self.world(db)
            let start = w.t0
            let day: TimeInterval = 86_400
            _ = try await w.apply("s", .start(planID: "basic_monthly", periodStart: start, periodEnd: nil, trial: false, willRenew: true))
            w.clock.advance(seconds: 61 * day)
            let current = start.addingTimeInterval(60 * day)
            #expect(try await w.apply("n2", .renew(periodStart: current, periodEnd: current.addingTimeInterval(30 * day))) == .applied)
            let before = try await w.tokens().subscriptionTokens
            let missed = start.addingTimeInterval(30 * day)
            #expect(try await w.apply("n1", .renew(periodStart: missed, periodEnd: missed.addingTimeInterval(30 * day))) == .applied)
            #expect(try await w.apply("n1-again", .renew(periodStart: missed, periodEnd: missed.addingTimeInterval(30 * day))) == .ignored)
            #expect(try await w.subscription()?.currentPeriodStart.epochMilliseconds == current.epochMilliseconds)
            #expect(try await w.plan() == "basic_monthly")
            let granted = try await db.withConnection(logger: TestDatabase.logger) { tx in
                try await w.ledger.periodGrant(tx, userID: "u", periodKey: SubscriptionMachine.periodKey(missed))
            }
            #expect(granted == 50)
            // The month's rollover runs against today's balance (capped at the plan's 50), so it adds nothing net.
            #expect(before == 100)
            #expect(try await w.tokens().subscriptionTokens == 100)
            #expect(try await db.withConnection(logger: TestDatabase.logger) { try await w.ledger.verify($0) }.ok)
        }
    }

    /// A yearly plan's refund takes back every month the drip granted, and its reversal gives them back with access to
    /// the end of the year and the drip going on (before: month 0 only, and access to the end of the first month).
    @Test(arguments: TestDatabase.engines)
    func aYearlyRefundCoversItsMonths(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let w = try await Self.world(db)
            let start = w.t0
            _ = try await w.apply("s", .start(planID: "pro_yearly", periodStart: start, periodEnd: nil, trial: false, willRenew: true))
            w.clock.advance(seconds: 32 * 86_400)
            _ = try await w.machine.dripYearlyPlans(db, limit: 10, logger: TestDatabase.logger)
            #expect(try await w.tokens().subscriptionTokens == 300)
            #expect(try await w.apply("r", .refund(periodKey: nil)) == .applied)
            #expect(try await w.tokens().subscriptionTokens == 0)
            #expect(try await w.plan() == "free")
            #expect(try await w.apply("v", .reverseRefund(periodKey: nil, periodEnd: nil)) == .applied)
            #expect(try await w.tokens().subscriptionTokens == 300)
            #expect(try await w.plan() == "pro_yearly")
            let yearOn = Calendar(identifier: .gregorian).date(byAdding: .year, value: 1, to: start)
            #expect(try await w.subscription()?.currentPeriodEnd.epochMilliseconds == yearOn?.epochMilliseconds)
            // The drip goes on after the reversal: the next month's tokens come.
            w.clock.advance(seconds: 31 * 86_400)
            _ = try await w.machine.dripYearlyPlans(db, limit: 10, logger: TestDatabase.logger)
            #expect(try await w.tokens().subscriptionTokens == 300)
            #expect(
                try await db.withConnection(logger: TestDatabase.logger) { tx in
                    try await w.ledger.periodGrant(tx, userID: "u", periodKey: SubscriptionMachine.periodKey(start, month: 2))
                } == 150)
            #expect(try await db.withConnection(logger: TestDatabase.logger) { try await w.ledger.verify($0) }.ok)
        }
    }

    /// Packs free, bought, included in pro, locked and retired (bought before); "u" bought "bought" and "retired".
    static func addPacks(_ db: any Database) async throws {
        try await db.transaction(logger: TestDatabase.logger) { tx in
            for (id, premium, plans, active) in [
                ("free-pack", false, "[]", true), ("bought", true, "[]", true), ("in-pro", true, #"["pro_monthly"]"#, true),
                ("locked", true, "[]", true), ("retired", true, "[]", false),
            ] {
                try await tx.query(
                    """
                    INSERT INTO sticker_packs (id, name, description, category, is_premium, token_price, included_in_plans, is_active, sort_order,
                                               sticker_count, preview_stickers, created_at_ms, updated_at_ms)
                    VALUES (?, ?, '', 'emoji', ?, 10, ?, ?, 0, 1, '[]', 0, 0)
                    """, [id, id, premium, plans, active])
            }
            try await tx.query("INSERT INTO pack_unlocks (user_id, pack_id, tokens_spent, created_at_ms) VALUES ('u', 'bought', 10, 0)")
            try await tx.query("INSERT INTO pack_unlocks (user_id, pack_id, tokens_spent, created_at_ms) VALUES ('u', 'retired', 10, 0)")
        }
    }

    /// A default profile "d" (Parent) and a restricted one "p" (Kid) for user "u".
    static func addProfiles(_ db: any Database) async throws {
        try await db.transaction(logger: TestDatabase.logger) { tx in
            for (id, isDefault, purchases) in [("d", true, true), ("p", false, false)] {
                try await tx.query(
                    """
                    INSERT INTO family_profiles (id, user_id, name, is_default, can_make_purchases, can_use_custom_content_types, created_at_ms, updated_at_ms)
                    VALUES (?, 'u', ?, ?, ?, ?, 0, 0)
                    """, [id, id == "p" ? "Kid" : "Parent", isDefault, purchases, true])
            }
        }
    }

    @Test(
        "the one-statement entitlement snapshot equals the transactional one: no subscription, a plan, holds, lapsed and expired lots and holds, bought and plan-included packs",
        arguments: TestDatabase.engines)
    func oneStatementSnapshotMatchesTheFullOne(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            let w = try await Self.world(db)
            let service = EntitlementService(
                database: db, subscriptions: w.store, packs: StickerPackStore(catalog: w.store.catalog, clock: w.clock), ledger: w.ledger,
                accounts: TestAccounts(), clock: w.clock)
            try await Self.addProfiles(db)
            let profile = ProfilePermissions(id: "p", name: "Kid", canMakePurchases: false, canUseCustomContentTypes: true)
            let parent = ProfilePermissions(id: "d", name: "Parent", canMakePurchases: true, canUseCustomContentTypes: true)
            // The default profile when none is selected; on the free plan (one profile) the kid's is locked, and a gone
            // selection needs a new one: never the owner's profile. Services get none.
            for (selected, expected) in [("p", nil), (nil, Optional(parent)), ("gone", nil)] as [(String?, ProfilePermissions?)] {
                let snapshot = try await service.snapshot(userID: "u", withProfile: true, selectedProfileID: selected, logger: TestDatabase.logger)
                #expect(snapshot.profile == expected && snapshot.profileSelectionRequired == (expected == nil), "\(selected ?? "none")")
            }
            #expect(try await service.snapshot(userID: "u", withProfile: false, selectedProfileID: "p", logger: TestDatabase.logger).profile == nil)
            func compare(_ label: String) async throws -> EntitlementSnapshot {
                let fast = try await service.snapshot(userID: "u", withProfile: true, selectedProfileID: "p", logger: TestDatabase.logger)
                let full = try await db.readTransaction(logger: TestDatabase.logger) {
                    try await service.snapshot($0, userID: "u", profile: .found(profile, rank: 1))
                }
                #expect(fast == full, "\(label)")
                // A rendering reused from an earlier call is byte-identical to a fresh one (a new service has none kept).
                let subject = SnapshotSubject.user("u", withProfile: true, selectedProfileID: "p")
                let reused = try #require(try await service.rendered(subject: subject, logger: TestDatabase.logger)?.snapshot)
                let fresh = try #require(
                    try await EntitlementService(
                        database: db, subscriptions: w.store, packs: service.packs, ledger: w.ledger, accounts: TestAccounts(), clock: w.clock
                    )
                    .rendered(subject: subject, logger: TestDatabase.logger)?.snapshot)
                #expect(reused.body == fresh.body && reused.etag == fresh.etag && reused.snapshot == fast, "\(label)")
                return fast
            }
            let new = try await compare("new user")
            #expect(new.planId == "free" && new.profile == nil && new.profileSelectionRequired, "the kid's profile is locked on free")
            try await Self.addPacks(db)
            #expect(try await compare("bought packs").unlockedStickerPacks == ["bought"])
            #expect(
                try await w.apply("e1", .start(planID: "pro_monthly", periodStart: w.t0, periodEnd: nil, trial: false, willRenew: true)) == .applied)
            let pro = try await compare("on pro")
            #expect(pro.planId == "pro_monthly" && pro.unlockedStickerPacks == ["bought", "in-pro"])
            #expect(pro.profile == profile && !pro.profileSelectionRequired, "pro allows five profiles")
            try await db.transaction(logger: TestDatabase.logger) { tx in
                _ = try await w.ledger.grant(
                    tx, userID: "u", amountTokens: 30, bucket: .bonus, reason: "promo", expiresAt: w.t0.addingTimeInterval(3600))
                _ = try await w.ledger.grant(
                    tx, userID: "u", amountTokens: 5, bucket: .bonus, reason: "promo", expiresAt: w.t0.addingTimeInterval(7200))
                _ = try await w.ledger.hold(tx, userID: "u", amountTokens: 20, ttlSeconds: 600, reason: "job")
                _ = try await w.ledger.hold(tx, userID: "u", amountTokens: 3, ttlSeconds: 86400, reason: "job")
            }
            let held = try await compare("pending holds")
            #expect(held.tokens.held == 23)
            w.clock.advance(seconds: 900)  // the 20-token hold expired (not yet released): the full path answers
            #expect(try await compare("expired hold").tokens.held == 3)
            // Only the user's own reads release it (`EntitlementHTTPTests`); this one, as operators and services read, writes nothing.
            let pendingHolds = "SELECT COUNT(*) AS n FROM ledger_holds WHERE user_id = 'u' AND status = 'pending'"
            #expect(try await db.quickQuery(pendingHolds, [], logger: TestDatabase.logger).first?.int("n") == 2)
            try await db.transaction(logger: TestDatabase.logger) { tx in _ = try await w.ledger.balances(tx, userID: "u") }  // released
            w.clock.advance(seconds: 3600)  // the 30-token lot lapsed, not yet expired by a write
            let lapsed = try await compare("lapsed lot")
            #expect(lapsed.tokens.held == 3)
            w.clock.advance(seconds: 40 * 86400)  // the period ended: free again, bought packs stay
            let over = try await compare("period over")
            #expect(over.unlockedStickerPacks == ["bought"] && over.profile == nil && over.profileSelectionRequired)
        }
    }
}

/// Auth's answers, as the application wires them (users and profiles are Auth's tables).
struct TestAccounts: AccountDirectory {
    func isActiveUser(_ userID: String, _ tx: any SQLExecutor, lock: Bool) async throws -> Bool {
        try await AuthService.isActiveUser(userID, tx, lock: lock)
    }
    func profileCount(userID: String, _ tx: any SQLExecutor) async throws -> Int { try await ProfileService.count(userID: userID, tx) }
    func snapshotProfileFragment(engine: Engine) -> SQLJoinFragment { ProfileService.snapshotFragment(engine: engine) }
    /// Reservations are tested over HTTP (`ReserveHTTPTests`); these tests never name a profile.
    func profile(userID: String, profileID: String, _ tx: any SQLExecutor) async throws -> ProfileAccess? { nil }
}
