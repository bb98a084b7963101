import Clock
import Foundation
import Ledger
import Storage
import TestSupport
import Testing

/// A reproducible random number generator (SplitMix64).
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// The ledger's rules, restated independently in memory.
struct LedgerModel {
    struct Lot { let id: Int; var remaining: Int64; let expiresAt: Date? }
    struct Part { let bucket: Bucket; let lot: Int?; let amount: Int64 }
    struct Hold { let userID: String; let amount: Int64; let parts: [Part]; let expiresAt: Date }
    var lots: [String: [Lot]] = [:]
    var subscription: [String: Int64] = [:]
    var purchased: [String: Int64] = [:]
    var holds: [String: Hold] = [:]
    var nextLot = 0

    mutating func access(_ user: String, now: Date) {
        for (id, hold) in holds where hold.userID == user && hold.expiresAt <= now {
            release(hold.parts, user: user)
            holds[id] = nil
        }
        lots[user] = (lots[user] ?? []).map { lot in
            var lot = lot
            if let expiry = lot.expiresAt, expiry <= now { lot.remaining = 0 }
            return lot
        }
    }

    mutating func release(_ parts: [Part], user: String) {
        for part in parts {
            switch part.bucket {
            case .bonus: if let i = lots[user]?.firstIndex(where: { $0.id == part.lot }) { lots[user]![i].remaining += part.amount }
            case .subscription: subscription[user, default: 0] += part.amount
            case .purchased: purchased[user, default: 0] += part.amount
            }
        }
    }

    func balances(_ user: String) -> (bonus: Int64, subscription: Int64, purchased: Int64, held: Int64) {
        (
            (lots[user] ?? []).map(\.remaining).reduce(0, +), subscription[user] ?? 0, purchased[user] ?? 0,
            holds.values.filter { $0.userID == user }.map(\.amount).reduce(0, +)
        )
    }

    mutating func grant(_ user: String, _ amount: Int64, _ bucket: Bucket, expiresAt: Date?) {
        switch bucket {
        case .bonus:
            nextLot += 1
            lots[user, default: []].append(Lot(id: nextLot, remaining: amount, expiresAt: expiresAt))
        case .subscription: subscription[user, default: 0] += amount
        case .purchased: purchased[user, default: 0] += amount
        }
    }

    /// Takes `amount` in spend order, or returns nil when there is not enough.
    mutating func take(_ user: String, _ amount: Int64) -> [Part]? {
        let b = balances(user)
        guard b.bonus + b.subscription + b.purchased >= amount else { return nil }
        var remaining = amount
        var parts: [Part] = []
        let order = (lots[user] ?? []).indices.sorted { l, r in
            let a = lots[user]![l], c = lots[user]![r]
            switch (a.expiresAt, c.expiresAt) {
            case (nil, nil): return a.id < c.id
            case (nil, _): return false
            case (_, nil): return true
            case (let x?, let y?): return x == y ? a.id < c.id : x < y
            }
        }
        for i in order where remaining > 0 && lots[user]![i].remaining > 0 {
            let t = min(remaining, lots[user]![i].remaining)
            lots[user]![i].remaining -= t
            parts.append(Part(bucket: .bonus, lot: lots[user]![i].id, amount: t))
            remaining -= t
        }
        let s = min(remaining, subscription[user] ?? 0)
        if s > 0 { subscription[user]! -= s; parts.append(Part(bucket: .subscription, lot: nil, amount: s)); remaining -= s }
        let p = min(remaining, purchased[user] ?? 0)
        if p > 0 { purchased[user]! -= p; parts.append(Part(bucket: .purchased, lot: nil, amount: p)); remaining -= p }
        return parts
    }
}

@Suite("Token ledger")
struct LedgerModelTests {
    static func migrated(_ db: any Database) async throws {
        _ = try await db.migrate(db.engine.migrations, logger: TestDatabase.logger)
    }

    /// A seeded random workload, checked against the model after every step. Replay a failure with
    /// LEDGER_SEED=<seed printed in the failure>.
    @Test(arguments: TestDatabase.engines)
    func randomWorkloadMatchesTheModel(engine: Engine) async throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["LEDGER_SEED"] ?? "") ?? UInt64.random(in: 1...UInt64.max >> 1)
        try await TestDatabase.with(engine) { db, _ in
            try await Self.migrated(db)
            var run = Workload(db: db, seed: seed)
            for step in 0..<300 {
                let user = ["u1", "u2", "u3"].randomElement(using: &run.rng)!
                run.model.access(user, now: run.clock.now())
                let op = Int.random(in: 0..<100, using: &run.rng)
                let context = "seed \(seed), step \(step), op \(op), user \(user)"
                switch op {
                case 0..<25: try await run.grant(user)
                case 25..<50: try await run.spend(user, step: step, context: context)
                case 50..<70: try await run.hold(user, context: context)
                case 70..<82: try await run.capture(user, context: context)
                case 82..<90: try await run.void(user, context: context)
                default:
                    run.clock.advance(seconds: Double.random(in: 1...120, using: &run.rng))
                    continue
                }
                try await run.checkBalances(user, context: context)
            }
            let ledger = run.ledger
            let report = try await db.withConnection(logger: TestDatabase.logger) { try await ledger.verify($0) }
            #expect(report.ok, "seed \(seed): \(report.differences)")
            #expect(report.transfersChecked > 100)
            #expect(
                engine == .postgres ? run.oneStatementSpends > 5 && run.oneStatementReplays > 0 : run.oneStatementSpends == 0,
                "seed \(seed): \(run.oneStatementSpends) one-statement spends, \(run.oneStatementReplays) replayed")
        }
    }

    @Test(arguments: TestDatabase.engines)
    func concurrentSpendsNeverOverdraw(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, handle in
            try await Self.migrated(db)
            let ledger = Ledger(clock: SystemTimeSource())
            _ = try await db.transaction(logger: TestDatabase.logger) { tx in
                try await ledger.grant(tx, userID: "hot", amountTokens: 100, bucket: .purchased, reason: "grant")
            }
            // Two independent pools (as two service processes would have) spend the same user's tokens.
            let succeeded = try await TestDatabase.open(handle) { other in
                try await withThrowingTaskGroup(of: Bool.self) { group in
                    for i in 0..<60 {
                        let target = i.isMultiple(of: 2) ? db : other
                        group.addTask { try await Self.spendOrHold(i, target: target, ledger: ledger) }
                    }
                    return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
                }
            }
            #expect(succeeded == 33)  // 100 tokens, 3 at a time
            let balance = try await db.transaction(logger: TestDatabase.logger) { tx in try await ledger.balances(tx, userID: "hot") }
            #expect(balance.totalTokens == 1 && balance.heldTokens == 0)
            #expect(try await db.withConnection(logger: TestDatabase.logger) { try await ledger.verify($0) }.ok)
        }
    }

    /// Every third task holds then captures 3 tokens, the others spend 3; false when the tokens ran out.
    static func spendOrHold(_ i: Int, target: any Database, ledger: Ledger) async throws -> Bool {
        do {
            if i.isMultiple(of: 3) {
                let hold = try await leased(target) { tx in try await ledger.hold(tx, userID: "hot", amountTokens: 3, ttlSeconds: 60, reason: "job") }
                _ = try await leased(target) { tx in try await ledger.capture(tx, holdID: hold.id) }
            } else {
                _ = try await leased(target) { tx in try await ledger.spend(tx, userID: "hot", amountTokens: 3, reason: "spend") }
            }
            return true
        } catch LedgerError.insufficientTokens { return false }
    }

    /// One transaction; a lease that found no connection ran nothing (`StorageError.unavailable`) and is tried again, as
    /// a client retries a 503: under the whole suite's load a pool can stay busy past its 15 s lease.
    static func leased<T: Sendable>(_ db: any Database, _ work: @escaping @Sendable (any SQLExecutor) async throws -> T) async throws -> T {
        for _ in 1..<5 {
            do { return try await db.transaction(logger: TestDatabase.logger, work) } catch StorageError.unavailable {}
        }
        return try await db.transaction(logger: TestDatabase.logger, work)
    }

    @Test(arguments: TestDatabase.engines)
    func periodsRollOverExactlyOnce(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            try await Self.migrated(db)
            let ledger = Ledger(clock: SystemTimeSource())
            _ = try await db.transaction(logger: TestDatabase.logger) { tx in
                try await ledger.grant(tx, userID: "s", amountTokens: 120, bucket: .subscription, reason: "grant")
            }
            let starts = try await withThrowingTaskGroup(of: Bool.self) { group in
                for _ in 0..<4 {
                    group.addTask {
                        try await db.transaction(logger: TestDatabase.logger) { tx in
                            try await ledger.startPeriod(
                                tx, userID: "s", periodKey: "p1", planID: "pro_monthly", monthlyTokens: 150, maxRolloverTokens: 50)
                        }
                    }
                }
                return try await group.reduce(into: [Bool]()) { $0.append($1) }
            }
            #expect(starts.filter { $0 }.count == 1)
            let balance = try await db.transaction(logger: TestDatabase.logger) { tx in try await ledger.balances(tx, userID: "s") }
            #expect(balance.subscriptionTokens == 50 + 150)  // 70 above the rollover cap expired, then the period's 150
            let expired = try await db.withConnection(logger: TestDatabase.logger) { tx in
                try await tx.first("SELECT amount FROM ledger_transfers WHERE reason = 'rollover_expiry'")?.int("amount")
            }
            #expect(expired == 70)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func expiredHoldsAreReleasedAndCannotBeCapturedLate(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            try await Self.migrated(db)
            let clock = ManualTimeSource()
            let ledger = Ledger(clock: clock)
            let hold = try await db.transaction(logger: TestDatabase.logger) { tx in
                _ = try await ledger.grant(tx, userID: "h", amountTokens: 10, bucket: .purchased, reason: "grant")
                return try await ledger.hold(tx, userID: "h", amountTokens: 7, ttlSeconds: 60, reason: "job")
            }
            #expect(try await db.transaction(logger: TestDatabase.logger) { try await ledger.balances($0, userID: "h") }.totalTokens == 3)
            clock.advance(seconds: 61)
            // The sweeper releases it…
            #expect(try await ledger.expireHolds(db, limit: 10, logger: TestDatabase.logger) == 1)
            #expect(try await ledger.expireHolds(db, limit: 10, logger: TestDatabase.logger) == 0)
            // …and a late capture sees the final state.
            await #expect {
                _ = try await db.transaction(logger: TestDatabase.logger) { tx in try await ledger.capture(tx, holdID: hold.id) }
            } throws: { error in
                guard case LedgerError.holdResolved(let state) = error else { return false }
                return state.status == "expired" && state.capturedAmount == 0
            }
            let balance = try await db.transaction(logger: TestDatabase.logger) { try await ledger.balances($0, userID: "h") }
            #expect(balance.totalTokens == 10 && balance.heldTokens == 0)
            await #expect(throws: LedgerError.holdNotFound) {
                _ = try await db.transaction(logger: TestDatabase.logger) { tx in try await ledger.void(tx, holdID: "nope") }
            }
        }
    }

    @Test(arguments: TestDatabase.engines)
    func verifyFindsTamperingAndTransfersAreAppendOnly(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            try await Self.migrated(db)
            let ledger = Ledger(clock: SystemTimeSource())
            _ = try await db.transaction(logger: TestDatabase.logger) { tx in
                _ = try await ledger.grant(tx, userID: "t", amountTokens: 10, bucket: .bonus, reason: "grant")
                _ = try await ledger.grant(tx, userID: "h", amountTokens: 9, bucket: .purchased, reason: "grant")
                return try await ledger.hold(tx, userID: "h", amountTokens: 4, ttlSeconds: 600, reason: "job")
            }
            #expect(try await db.withConnection(logger: TestDatabase.logger) { try await ledger.verify($0) }.ok)
            // A hold marked voided without its transfers: the holds account still holds it.
            try await db.transaction(logger: TestDatabase.logger) { try await $0.query("UPDATE ledger_holds SET status = 'voided'") }
            let voided = try await db.withConnection(logger: TestDatabase.logger) { try await ledger.verify($0) }
            #expect(voided.differences == ["holds account holds 4 but pending holds add up to 0"])
            try await db.transaction(logger: TestDatabase.logger) { try await $0.query("UPDATE ledger_holds SET status = 'pending'") }
            // Both engines refuse to change a transfer (a trigger each).
            await #expect(throws: (any Error).self) {
                try await db.transaction(logger: TestDatabase.logger) { try await $0.query("UPDATE ledger_transfers SET amount = 1") }
            }
            await #expect(throws: (any Error).self) {
                try await db.transaction(logger: TestDatabase.logger) { try await $0.query("DELETE FROM ledger_transfers") }
            }
            try await db.transaction(logger: TestDatabase.logger) {
                try await $0.query("UPDATE ledger_accounts SET balance = 11 WHERE id = 'user:t:bonus'")
            }
            let report = try await db.withConnection(logger: TestDatabase.logger) { try await ledger.verify($0) }
            #expect(!report.ok)
            #expect(report.differences.contains { $0.contains("user:t:bonus: stored balance 11 but transfers sum to 10") })
            #expect(report.differences.contains { $0.contains("bonus balance 11 but its lots hold 10") })
        }
    }

    /// More bonus lots than one page of the allocation: a spend of all of them (and more) takes every lot, in order, and
    /// never traps (it once read only the first 1,000 lots and trapped on the rest).
    @Test(arguments: TestDatabase.engines)
    func aSpendReachesPastAThousandLots(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            try await Self.migrated(db)
            let ledger = Ledger(clock: SystemTimeSource())
            let lots = Ledger.lotPage + 5
            try await db.transaction(logger: TestDatabase.logger) { tx in
                for _ in 0..<lots { _ = try await ledger.grant(tx, userID: "many", amountTokens: 1, bucket: .bonus, reason: "grant") }
                _ = try await ledger.grant(tx, userID: "many", amountTokens: 3, bucket: .purchased, reason: "buy")
            }
            let spent = try await db.transaction(logger: TestDatabase.logger) { tx in
                try await ledger.spend(tx, userID: "many", amountTokens: Int64(lots + 2), reason: "spend")
            }
            #expect(spent.balances.bonusTokens == 0 && spent.balances.purchasedTokens == 1)
            let report = try await db.withConnection(logger: TestDatabase.logger) { try await ledger.verify($0) }
            #expect(report.ok, "\(report.differences)")
        }
    }

    @Test func inputsAreChecked() async throws {
        try await TestDatabase.with(.sqlite) { db, _ in
            try await Self.migrated(db)
            let ledger = Ledger(clock: SystemTimeSource())
            for (amount, reason) in [(Int64(0), "grant"), (-5, "grant"), (LedgerLimits.amountTokensMax + 1, "grant"), (5, ""), (5, "bad reason!")] {
                await #expect(throws: LedgerError.self) {
                    _ = try await db.transaction(logger: TestDatabase.logger) { tx in
                        try await ledger.grant(tx, userID: "v", amountTokens: amount, bucket: .purchased, reason: reason)
                    }
                }
            }
            await #expect(throws: LedgerError.invalid("Only bonus grants can expire.")) {
                _ = try await db.transaction(logger: TestDatabase.logger) { tx in
                    try await ledger.grant(
                        tx, userID: "v", amountTokens: 5, bucket: .purchased, reason: "grant", expiresAt: Date().addingTimeInterval(60))
                }
            }
        }
    }
}

/// One run of the random workload: the ledger, the model it is checked against, and the random choices.
struct Workload {
    let db: any Database
    let clock = ManualTimeSource()
    let ledger: Ledger
    var rng: SeededGenerator
    var model = LedgerModel()
    var oneStatementSpends = 0
    var oneStatementReplays = 0

    init(db: any Database, seed: UInt64) {
        self.db = db
        self.ledger = Ledger(clock: clock)
        self.rng = SeededGenerator(state: seed)
    }

    mutating func grant(_ user: String) async throws {
        let now = clock.now()
        let bucket = Bucket.allCases.randomElement(using: &rng)!
        let amount = Int64.random(in: 1...50, using: &rng)
        let expires: Date? = bucket == .bonus && Bool.random(using: &rng) ? now.addingTimeInterval(Double.random(in: 10...400, using: &rng)) : nil
        let ledger = self.ledger
        _ = try await db.transaction(logger: TestDatabase.logger) { tx in
            try await ledger.grant(tx, userID: user, amountTokens: amount, bucket: bucket, reason: "grant", expiresAt: expires)
        }
        model.grant(user, amount, bucket, expiresAt: expires)
    }

    /// Half the spends try PostgreSQL's one-statement path first (SQLite always declines it).
    mutating func spend(_ user: String, step: Int, context: String) async throws {
        let amount = Int64.random(in: 1...60, using: &rng)
        let expected = model.take(user, amount)
        let ledger = self.ledger
        do {
            if Bool.random(using: &rng), try await spendInOneStatement(user, amount: amount, step: step, expected: expected, context: context) {
                return
            }
            _ = try await db.transaction(logger: TestDatabase.logger) { tx in
                try await ledger.spend(tx, userID: user, amountTokens: amount, reason: "spend")
            }
            #expect(expected != nil, "spend succeeded but the model had too little: \(context)")
        } catch let LedgerError.insufficientTokens(available) {
            let b = model.balances(user)
            #expect(expected == nil && available == b.bonus + b.subscription + b.purchased, "\(context)")
        }
    }

    /// True when the statement spent (and its answer matched the model); false when it declined.
    mutating func spendInOneStatement(_ user: String, amount: Int64, step: Int, expected: [LedgerModel.Part]?, context: String) async throws -> Bool {
        let ledger = self.ledger
        let spend = { @Sendable (connection: any SQLExecutor) async throws -> OneStatementSpend in
            try await ledger.spendInOneStatement(
                connection, caller: .known("test"), key: "step-\(step)", requestJSON: "{}", userID: user, amountTokens: amount, reason: "spend",
                metadata: nil
            ).outcome
        }
        let outcome = try await db.withConnection(logger: TestDatabase.logger, spend)
        guard case .spent(let result) = outcome else {
            #expect(outcome == .fallback, "\(context)")
            return false
        }
        oneStatementSpends += 1
        #expect(expected != nil, "one-statement spend succeeded but the model had too little: \(context)")
        let b = model.balances(user)
        #expect(
            result.balances
                == BucketBalances(bonusTokens: b.bonus, subscriptionTokens: b.subscription, purchasedTokens: b.purchased, heldTokens: b.held),
            "\(context)")
        #expect(result.userId == user && result.amount == amount, "\(context)")
        // The record the function stored is the outcome Swift reads back: the same key replays this very result (or the
        // statement declines without writing, and the transactional path replays it).
        switch try await db.withConnection(logger: TestDatabase.logger, spend) {
        case .stored(let record):
            oneStatementReplays += 1
            let replayed: IdempotentOutcome<LedgerResult> = try IdempotencyStore.replay(record, request: [:])
            #expect(replayed == .succeeded(result), "\(context)")
        case .fallback: break
        case .spent: Issue.record("the same key spent twice: \(context)")
        }
        return true
    }

    mutating func hold(_ user: String, context: String) async throws {
        let now = clock.now()
        let amount = Int64.random(in: 1...40, using: &rng)
        let ttl = Int.random(in: 5...200, using: &rng)
        let parts = model.take(user, amount)
        let ledger = self.ledger
        do {
            let hold = try await db.transaction(logger: TestDatabase.logger) { tx in
                try await ledger.hold(tx, userID: user, amountTokens: amount, ttlSeconds: ttl, reason: "job")
            }
            let parts = try #require(parts, "hold succeeded but the model had too little: \(context)")
            model.holds[hold.id] = .init(userID: user, amount: amount, parts: parts, expiresAt: now.addingTimeInterval(Double(ttl)))
        } catch LedgerError.insufficientTokens {
            #expect(parts == nil, "\(context)")
        }
    }

    /// The model: the captured amount leaves part by part; the rest returns. A second resolution is refused with the final state.
    mutating func capture(_ user: String, context: String) async throws {
        guard let (id, hold) = model.holds.filter({ $0.value.userID == user }).sorted(by: { $0.key < $1.key }).first else { return }
        let amount = Bool.random(using: &rng) ? nil : Int64.random(in: 1...hold.amount, using: &rng)
        let ledger = self.ledger
        let captured = try await db.transaction(logger: TestDatabase.logger) { tx in try await ledger.capture(tx, holdID: id, amountTokens: amount) }
        #expect(captured.status == "captured" && captured.capturedAmount == (amount ?? hold.amount), "\(context)")
        var left = amount ?? hold.amount
        let back = hold.parts.compactMap { part -> LedgerModel.Part? in
            let t = min(left, part.amount)
            left -= t
            return part.amount - t > 0 ? .init(bucket: part.bucket, lot: part.lot, amount: part.amount - t) : nil
        }
        model.release(back, user: user)
        model.holds[id] = nil
        await #expect(throws: LedgerError.holdResolved(captured)) {
            _ = try await db.transaction(logger: TestDatabase.logger) { tx in try await ledger.void(tx, holdID: id) }
        }
    }

    mutating func void(_ user: String, context: String) async throws {
        guard let (id, hold) = model.holds.filter({ $0.value.userID == user }).sorted(by: { $0.key < $1.key }).first else { return }
        let ledger = self.ledger
        let voided = try await db.transaction(logger: TestDatabase.logger) { tx in try await ledger.void(tx, holdID: id) }
        #expect(voided.status == "voided", "\(context)")
        model.release(hold.parts, user: user)
        model.holds[id] = nil
    }

    /// After every step: the lock-free read, then the settling read, are the model's balances.
    mutating func checkBalances(_ user: String, context: String) async throws {
        let ledger = self.ledger
        let peeked = try await db.readTransaction(logger: TestDatabase.logger) { tx in try await ledger.peekBalances(tx, userID: user) }
        let actual = try await db.transaction(logger: TestDatabase.logger) { tx in try await ledger.balances(tx, userID: user) }
        model.access(user, now: clock.now())
        let expected = model.balances(user)
        #expect(peeked == actual, "\(context): peek \(peeked) vs settled \(actual)")
        #expect(actual.bonusTokens == expected.bonus && actual.subscriptionTokens == expected.subscription, "\(context): \(actual) vs \(expected)")
        #expect(actual.purchasedTokens == expected.purchased && actual.heldTokens == expected.held, "\(context): \(actual) vs \(expected)")
    }
}
