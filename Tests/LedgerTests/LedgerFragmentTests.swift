import Clock
import Foundation
import Ledger
import Storage
import TestSupport
import Testing

/// The ledger's exported SQL (the entitlement snapshot's part, and the hold rules that PostgreSQL's one-statement spend
/// repeats): pinned to its column contract and to the figures the Swift ledger computes.
@Suite("Ledger fragments")
struct LedgerFragmentTests {
    @Test(arguments: TestDatabase.engines)
    func snapshotFragmentReadsWhatPeekBalancesComputes(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            _ = try await db.migrate(engine.migrations, logger: TestDatabase.logger)
            let clock = ManualTimeSource()
            let ledger = Ledger(clock: clock)
            let log = TestDatabase.logger
            try await db.transaction(logger: log) { tx in
                _ = try await ledger.grant(
                    tx, userID: "f", amountTokens: 10, bucket: .bonus, reason: "grant", expiresAt: clock.now().addingTimeInterval(100))
                _ = try await ledger.grant(tx, userID: "f", amountTokens: 7, bucket: .purchased, reason: "grant")
                _ = try await ledger.grant(tx, userID: "f", amountTokens: 5, bucket: .subscription, reason: "grant")
                _ = try await ledger.hold(tx, userID: "f", amountTokens: 4, ttlSeconds: 50, reason: "job")
                _ = try await ledger.hold(tx, userID: "f", amountTokens: 3, ttlSeconds: 500, reason: "job")
            }
            let fragment = Ledger.snapshotFragment(engine: engine)
            #expect(fragment.columns == ["bonus_balance", "subscription_balance", "purchased_balance", "held", "expired_holds", "lapsed"])
            let sql = """
                SELECT x.id, \(fragment.select) FROM (SELECT CAST(? AS BIGINT) AS now_ms) n CROSS JOIN (SELECT CAST(? AS TEXT) AS id) x \(fragment.joins)
                """
            for (seconds, expiredHolds) in [(10.0, 0), (60.0, 1), (200.0, 1)] {
                clock.set(Date(timeIntervalSince1970: 1_800_000_000 + seconds))
                let row = try #require(try await db.withConnection(logger: log) { try await $0.first(sql, [clock.now(), "f"]) })
                #expect(Set(row.columns.names).isSuperset(of: fragment.columns))
                #expect(try row.int("expired_holds") == Int64(expiredHolds), "after \(seconds) s")
                let peeked = try await db.withConnection(logger: log) { try await ledger.peekBalances($0, userID: "f") }
                let fromFragment = try Ledger.snapshotBalances(row)
                // An expired hold makes the snapshot take the transactional path; otherwise the figures are the same.
                if expiredHolds == 0 { #expect(fromFragment == peeked, "after \(seconds) s") }
                #expect(fromFragment.heldTokens == peeked.heldTokens, "held counts live holds only, after \(seconds) s")
            }
        }
    }

    /// `ledger_spend_once` (migration 0017, its latest definition) repeats the expiry rule in PL/pgSQL; its conditions are these.
    @Test func theOneStatementSpendUsesTheHoldRules() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let function = try String(contentsOf: root.appendingPathComponent("migrations/postgres/0017_idempotent_outcomes.sql"), encoding: .utf8)
        #expect(function.contains("h." + HoldRules.live(now: "p_now_ms")))
        #expect(function.contains("h." + HoldRules.expired(now: "p_now_ms")))
        #expect(HoldRules.isExpired(expiresAt: Date(timeIntervalSince1970: 5), now: Date(timeIntervalSince1970: 5)))
        #expect(!HoldRules.isExpired(expiresAt: Date(timeIntervalSince1970: 6), now: Date(timeIntervalSince1970: 5)))
    }
}
