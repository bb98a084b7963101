import Clock
import Foundation
import Ledger
import Storage
import TestSupport
import Testing

/// One table of spend cases, generated from a fixed seed, that every implementation of the spend rules must pass with
/// the same result: the Swift ledger (`Ledger.spend`) on SQLite and on PostgreSQL, and PostgreSQL's PL/pgSQL
/// `ledger_spend_once` (migrations 0008, 0017). The expected result is the independent model's (`LedgerModel.take`): bonus
/// lots soonest-expiring first (never-expiring last), then subscription, then purchased; too few tokens → nothing
/// moves. A rule changed in one implementation fails here until the others agree.
@Suite("Ledger rule table")
struct LedgerRuleTableTests {
    struct Case: Sendable, CustomStringConvertible {
        /// Bonus lots: minutes until expiry (nil: never) and amount. Expiries are distinct (ties are ordered by id).
        let lots: [(minutes: Int?, amount: Int64)]
        let subscription: Int64
        let purchased: Int64
        let amount: Int64
        var total: Int64 { lots.map(\.amount).reduce(0, +) + subscription + purchased }
        var description: String { "lots \(lots), subscription \(subscription), purchased \(purchased), spend \(amount)" }
    }

    /// The generated table: every bucket empty or not, zero to five lots, spends below, at and above the total (all
    /// valid amounts; nothing to settle first, so the PL/pgSQL function must answer every case itself).
    static let table: [Case] = {
        var rng = SeededGenerator(state: 20_261_125)
        var cases: [Case] = []
        for index in 0..<150 {
            let lots = Array((1...6).shuffled(using: &rng).prefix(index % 6)).map { minutes in
                (minutes: minutes == 6 ? nil : minutes * 10, amount: Int64.random(in: 1...30, using: &rng))
            }
            let subscription = Bool.random(using: &rng) ? Int64.random(in: 1...40, using: &rng) : 0
            let purchased = Bool.random(using: &rng) ? Int64.random(in: 1...40, using: &rng) : 0
            let total = lots.map(\.amount).reduce(0, +) + subscription + purchased
            let amount: Int64 =
                switch index % 5 {
                case 0: max(1, total)
                case 1: total + 1
                default: Int64.random(in: 1...max(1, total), using: &rng)
                }
            cases.append(Case(lots: lots, subscription: subscription, purchased: purchased, amount: amount))
        }
        return cases
    }()

    enum Path: String, Sendable, CaseIterable { case swift, plpgsql }

    @Test(arguments: [(Engine.sqlite, Path.swift), (.postgres, .swift), (.postgres, .plpgsql)])
    func everyImplementationPassesTheTable(engine: Engine, path: Path) async throws {
        #expect(Self.table.filter { $0.amount > $0.total }.count >= 20 && Self.table.filter { $0.lots.count >= 3 }.count >= 50)
        try await TestDatabase.with(engine) { db, _ in
            _ = try await db.migrate(engine.migrations, logger: TestDatabase.logger)
            let clock = ManualTimeSource()
            let ledger = Ledger(clock: clock)
            let log = TestDatabase.logger
            var declined = 0
            for (index, row) in Self.table.enumerated() {
                let user = "rule-\(index)"
                var model = LedgerModel()
                try await db.transaction(logger: log) { tx in
                    for lot in row.lots {
                        let expiry = lot.minutes.map { clock.now().addingTimeInterval(Double($0) * 60) }
                        _ = try await ledger.grant(tx, userID: user, amountTokens: lot.amount, bucket: .bonus, reason: "grant", expiresAt: expiry)
                    }
                    for (bucket, amount) in [(Bucket.subscription, row.subscription), (.purchased, row.purchased)] where amount > 0 {
                        _ = try await ledger.grant(tx, userID: user, amountTokens: amount, bucket: bucket, reason: "grant")
                    }
                }
                for lot in row.lots {
                    model.grant(user, lot.amount, .bonus, expiresAt: lot.minutes.map { clock.now().addingTimeInterval(Double($0) * 60) })
                }
                model.grant(user, row.subscription, .subscription, expiresAt: nil)
                model.grant(user, row.purchased, .purchased, expiresAt: nil)
                let expected = model.take(user, row.amount)  // nil: too few, and the model is unchanged
                let spent = try await Self.spend(path, ledger: ledger, db: db, user: user, amount: row.amount, key: "rule-\(index)")
                #expect(spent == (expected != nil), "case \(index) (\(row)) on \(engine) \(path)")
                if !spent { declined += 1 }
                let balances = try await db.withConnection(logger: log) { try await ledger.peekBalances($0, userID: user) }
                let m = model.balances(user)
                #expect(
                    balances == BucketBalances(bonusTokens: m.bonus, subscriptionTokens: m.subscription, purchasedTokens: m.purchased, heldTokens: 0),
                    "case \(index) (\(row)) on \(engine) \(path)")
                // Which lots paid: what each lot has left, by its expiry.
                let lots = try await db.withConnection(logger: log) {
                    try await $0.query("SELECT expires_at_ms, remaining FROM ledger_lots WHERE user_id = ?", [user])
                }
                var left: [Int64?: Int64] = [:]
                for lot in lots { left[lot.optionalInt("expires_at_ms"), default: 0] += try lot.int("remaining") }
                var modelLeft: [Int64?: Int64] = [:]
                for lot in model.lots[user] ?? [] { modelLeft[lot.expiresAt?.epochMilliseconds, default: 0] += lot.remaining }
                #expect(left.filter { $0.value > 0 } == modelLeft.filter { $0.value > 0 }, "case \(index) (\(row)) on \(engine) \(path)")
            }
            #expect(declined >= 20, "too-few-tokens cases were run")
        }
    }

    /// One spend by `path`; false when it was refused for too few tokens (nothing written).
    static func spend(_ path: Path, ledger: Ledger, db: any Database, user: String, amount: Int64, key: String) async throws -> Bool {
        switch path {
        case .swift:
            do {
                _ = try await db.transaction(logger: TestDatabase.logger) { tx in
                    try await ledger.spend(tx, userID: user, amountTokens: amount, reason: "spend")
                }
                return true
            } catch LedgerError.insufficientTokens {
                return false
            }
        case .plpgsql:
            let outcome = try await db.withConnection(logger: TestDatabase.logger) { connection in
                try await ledger.spendInOneStatement(
                    connection, caller: .known("rules"), key: key, requestJSON: "{}", userID: user, amountTokens: amount,
                    reason: "spend", metadata: nil
                ).outcome
            }
            if case .spent = outcome { return true }
            #expect(outcome == .fallback)
            return false
        }
    }
}
