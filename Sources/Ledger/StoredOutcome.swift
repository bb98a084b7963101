import Foundation
import Storage

/// How an idempotent write's outcome is kept in `idempotency_records.outcome_json`: `{"result": <value>}` or
/// `{"error": {"kind": …}}`, dates as milliseconds since 1970, keys sorted. PostgreSQL's `ledger_spend_once` writes
/// the same form for a spend's `LedgerResult` (migration 0017); `LedgerRuleTableTests` replays its records through
/// ``decode(_:)``. A stored form is read for 35 days after it is written: change it only by adding optional members.
enum StoredOutcome<Value: Codable & Sendable> {
    struct Stored: Codable {
        var result: Value?
        var error: StoredLedgerError?
    }

    static func encode(_ outcome: IdempotentOutcome<Value>) throws -> String {
        let stored: Stored
        switch outcome {
        case .succeeded(let value): stored = Stored(result: value, error: nil)
        case .failed(let error): stored = Stored(result: nil, error: StoredLedgerError(error))
        case .sentBefore: throw StorageError.decoding(column: "outcome_json")  // only read, never written again
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .millisecondsSince1970
        return String(decoding: try encoder.encode(stored), as: UTF8.self)
    }

    static func decode(_ text: String) throws -> IdempotentOutcome<Value> {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .millisecondsSince1970
        guard let stored = try? decoder.decode(Stored.self, from: Data(text.utf8)) else { throw StorageError.decoding(column: "outcome_json") }
        if let value = stored.result { return .succeeded(value) }
        if let error = stored.error?.ledgerError { return .failed(error) }
        throw StorageError.decoding(column: "outcome_json")
    }
}

/// A remembered ledger failure as stored: a stable kind and the members it carries.
struct StoredLedgerError: Codable, Equatable {
    var kind: String
    var availableTokens: Int64?
    var hold: HoldState?
    var detail: String?
    var reversalOperationId: String?

    init(kind: String, availableTokens: Int64? = nil, hold: HoldState? = nil, detail: String? = nil, reversalOperationId: String? = nil) {
        self.kind = kind
        self.availableTokens = availableTokens
        self.hold = hold
        self.detail = detail
        self.reversalOperationId = reversalOperationId
    }

    init(_ error: LedgerError) {
        switch error {
        case .insufficientTokens(let available): self.init(kind: "insufficient_tokens", availableTokens: available)
        case .holdNotFound: self.init(kind: "hold_not_found")
        case .holdResolved(let hold): self.init(kind: "hold_resolved", hold: hold)
        case .invalid(let detail): self.init(kind: "invalid", detail: detail)
        case .userNotFound(let id): self.init(kind: "user_not_found", detail: id)
        case .idempotencyConflict(let fields): self.init(kind: "idempotency_conflict", detail: fields.joined(separator: ","))
        case .transferNotFound: self.init(kind: "transfer_not_found")
        case .alreadyReversed(let reversal): self.init(kind: "already_reversed", reversalOperationId: reversal)
        case .notReversible(let detail): self.init(kind: "not_reversible", detail: detail)
        case .allowanceExceeded(let allowance, let remaining):
            self.init(kind: "allowance_exceeded", availableTokens: remaining, detail: String(allowance))
        case .holdAwaitingApproval: self.init(kind: "hold_awaiting_approval")
        }
    }

    /// The failure again; nil for a kind or members this build does not know.
    var ledgerError: LedgerError? {
        switch kind {
        case "insufficient_tokens": availableTokens.map { .insufficientTokens(availableTokens: $0) }
        case "hold_not_found": .holdNotFound
        case "hold_resolved": hold.map { .holdResolved($0) }
        case "invalid": detail.map { .invalid($0) }
        case "user_not_found": detail.map { .userNotFound($0) }
        case "idempotency_conflict": detail.map { .idempotencyConflict(fields: $0.split(separator: ",").map(String.init)) }
        case "transfer_not_found": .transferNotFound
        case "already_reversed": reversalOperationId.map { .alreadyReversed(reversalOperationID: $0) }
        case "not_reversible": detail.map { .notReversible($0) }
        case "hold_awaiting_approval": .holdAwaitingApproval
        case "allowance_exceeded":
            availableTokens.flatMap { remaining in detail.flatMap { Int64($0) }.map { .allowanceExceeded(allowance: $0, remaining: remaining) } }
        default: nil
        }
    }
}
