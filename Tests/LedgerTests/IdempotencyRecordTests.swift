import Clock
import Foundation
import Ledger
import Storage
import TestSupport
import Testing

/// Idempotency records keep outcomes in the ledger's terms (migration 0017); records written before keep the HTTP answer
/// that was sent and must replay unchanged until they age out.
@Suite("Idempotency records")
struct IdempotencyRecordTests {
    static let legacyBody = #"{"availableTokens":3,"code":"insufficient_tokens","detail":"Not enough tokens: 3 available.","status":402}"#
    static let request = ["endpoint": "\"spend\"", "amount": "5"]

    @Test(arguments: TestDatabase.engines)
    func recordsWrittenBeforeTheOutcomeFormatReplayAsTheyWereSent(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            _ = try await db.migrate(engine.migrations.filter { $0.version < 17 }, logger: TestDatabase.logger)
            try await db.transaction(logger: TestDatabase.logger) { tx in
                _ = try await tx.query(
                    "INSERT INTO idempotency_records (caller, idempotency_key, request_json, status, response_json, created_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
                    ["svc", "old", try IdempotencyStore.requestJSON(Self.request), 402, Self.legacyBody, Date()])
            }
            _ = try await db.migrate(engine.migrations, logger: TestDatabase.logger)
            let store = IdempotencyStore(clock: ManualTimeSource())
            let replayed: IdempotentResult<LedgerResult> = try await store.run(
                db, caller: "svc", key: "old", request: Self.request, lane: "test", logger: TestDatabase.logger
            ) { _ in
                Issue.record("an old record's request ran again")
                throw LedgerError.holdNotFound
            }
            #expect(replayed.replayed && replayed.outcome == .sentBefore(status: 402, body: Self.legacyBody))
            await #expect(throws: LedgerError.idempotencyConflict(fields: ["amount"])) {
                let _: IdempotentResult<LedgerResult> = try await store.run(
                    db, caller: "svc", key: "old", request: Self.request.merging(["amount": "6"]) { $1 }, lane: "test", logger: TestDatabase.logger
                ) { _ in throw LedgerError.holdNotFound }
            }
            guard engine == .postgres else { return }
            // The one-statement spend meets the same old record (for a user who could spend) and hands it back for the same
            // replay, writing nothing.
            let ledger = Ledger(clock: ManualTimeSource())
            _ = try await db.transaction(logger: TestDatabase.logger) {
                try await ledger.grant($0, userID: "u", amountTokens: 10, bucket: .purchased, reason: "grant")
            }
            let answer = try await db.withConnection(logger: TestDatabase.logger) { connection in
                try await ledger.spendInOneStatement(
                    connection, caller: .known("svc"), key: "old", requestJSON: try IdempotencyStore.requestJSON(Self.request), userID: "u",
                    amountTokens: 5, reason: "spend", metadata: nil)
            }
            let result = try IdempotencyStore.answer(answer.outcome, request: Self.request)
            #expect(result?.replayed == true && result?.outcome == .sentBefore(status: 402, body: Self.legacyBody))
            let balance = try await db.withConnection(logger: TestDatabase.logger) { try await ledger.balances($0, userID: "u") }
            #expect(balance.purchasedTokens == 10)
        }
    }

    /// Every failure the store remembers comes back as itself, and a success with dates as it was.
    @Test(arguments: TestDatabase.engines)
    func everyRememberedOutcomeReplaysAsItself(engine: Engine) async throws {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .millisecondsSince1970
        let hold = try decoder.decode(
            HoldState.self,
            from: Data(
                #"{"id":"h1","userId":"u1","status":"captured","amount":9,"capturedAmount":4,"expiresAt":1764000000123,"resolvedAt":1764000000456}"#
                    .utf8))
        let failures: [LedgerError] = [
            .insufficientTokens(availableTokens: 7), .holdNotFound, .holdResolved(hold), .invalid("Field 'amount' must be positive."),
            .transferNotFound, .alreadyReversed(reversalOperationID: "op-9"), .notReversible("Void the hold instead."),
        ]
        try await TestDatabase.with(engine) { db, _ in
            _ = try await db.migrate(engine.migrations, logger: TestDatabase.logger)
            let store = IdempotencyStore(clock: ManualTimeSource())
            for (index, failure) in failures.enumerated() {
                for attempt in 0..<2 {
                    let result: IdempotentResult<LedgerResult> = try await store.run(
                        db, caller: "svc", key: "f\(index)", request: [:], lane: "test", logger: TestDatabase.logger
                    ) { _ in throw failure }
                    #expect(result.outcome == .failed(failure) && result.replayed == (attempt == 1), "\(failure)")
                }
            }
            for attempt in 0..<2 {
                let result: IdempotentResult<HoldState> = try await store.run(
                    db, caller: "svc", key: "hold", request: [:], lane: "test", logger: TestDatabase.logger
                ) { _ in hold }
                #expect(result.outcome == .succeeded(hold) && result.replayed == (attempt == 1))
            }
            // Not remembered: an unknown user is thrown each time, and nothing is stored under the key.
            for _ in 0..<2 {
                await #expect(throws: LedgerError.userNotFound("u9")) {
                    let _: IdempotentResult<LedgerResult> = try await store.run(
                        db, caller: "svc", key: "unknown", request: [:], lane: "test", logger: TestDatabase.logger
                    ) { _ in throw LedgerError.userNotFound("u9") }
                }
            }
        }
    }
}
