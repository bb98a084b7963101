import Clock
import Foundation
import Storage

/// A value in an event's `data` (JSON): exact integers, never floating point.
public indirect enum EventValue: Sendable, Equatable {
    case string(String)
    case int(Int64)
    case bool(Bool)
    case null
    case object([String: EventValue])
    /// JSON text already checked by its producer (a caller's metadata), embedded as is.
    case rawJSON(String)

    /// `nil` → JSON null.
    public static func optional(_ text: String?) -> EventValue { text.map(EventValue.string) ?? .null }
    public static func optional(_ number: Int64?) -> EventValue { number.map(EventValue.int) ?? .null }
    /// A time as ISO 8601 with milliseconds (UTC), like every time in the HTTP answers.
    public static func date(_ date: Date?) -> EventValue {
        guard let date else { return .null }
        return .string(ISOTime.string(date))
    }

    /// Compact JSON, keys sorted (the same text for the same value).
    public var json: String {
        switch self {
        case .string(let text): return Self.quoted(text)
        case .int(let number): return String(number)
        case .bool(let flag): return flag ? "true" : "false"
        case .null: return "null"
        case .rawJSON(let text): return text
        case .object(let fields):
            return "{" + fields.sorted { $0.key < $1.key }.map { "\(Self.quoted($0.key)):\($0.value.json)" }.joined(separator: ",") + "}"
        }
    }

    static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20: out += String(format: "\\u%04x", scalar.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}

/// Something that happened which other systems care about (a webhook event): its contract name (`tokens.spent`), the
/// user it concerns, its `data`, and for balance changes the spendable total before and after (for `balance.low`).
public struct DomainEvent: Sendable, Equatable {
    public let type: String
    public let userID: String?
    public let data: [String: EventValue]
    public let balanceBefore: Int64?
    public let balanceAfter: Int64?

    public init(type: String, userID: String?, data: [String: EventValue], balanceBefore: Int64? = nil, balanceAfter: Int64? = nil) {
        self.type = type
        self.userID = userID
        self.data = data
        self.balanceBefore = balanceBefore
        self.balanceAfter = balanceAfter
    }
}

/// Where modules record their events: in the caller's transaction, so an event exists exactly when its change committed
/// (the transactional outbox). The outbox's owner (Webhooks, `Outbox`) implements it; modules receive it at wiring.
public protocol EventSink: Sendable {
    func emit(_ tx: any SQLExecutor, _ event: DomainEvent, at: Date) async throws
    /// For a module that must record an event inside one statement of its own (PostgreSQL's one-statement spend): an
    /// `INSERT … SELECT` that records one event per row of the named CTE, whose columns are `event_type` (TEXT), `user_id`
    /// (TEXT), `data` (TEXT, JSON), `balance_before` and `balance_after` (BIGINT, nullable) and `at_ms` (BIGINT). nil → record
    /// nothing.
    func insertFromCTE(named cte: String) -> String?
}

/// For module tests that do not look at events: records nothing.
public struct NoEvents: EventSink {
    public init() {}
    public func emit(_ tx: any SQLExecutor, _ event: DomainEvent, at: Date) async throws {}
    public func insertFromCTE(named cte: String) -> String? { nil }
}
