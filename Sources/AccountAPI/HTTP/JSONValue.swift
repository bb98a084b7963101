import Foundation

/// Any JSON value (for free-form `metadata`), re-encoded canonically (sorted keys). Numbers keep their exact value:
/// integers as `Int64`, other numbers as `Decimal` (38 significant digits), never through `Double`.
indirect enum JSONValue: Codable, Sendable, Equatable {
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Decimal)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let s = try? container.decode(String.self) {
            self = .string(s)
        } else if let b = try? container.decode(Bool.self) {
            self = .bool(b)
        } else if let n = try? container.decode(Int64.self) {
            self = .integer(n)
        } else if let n = try? container.decode(Decimal.self) {
            self = Self.exact(n)
        } else if let a = try? container.decode([JSONValue].self) {
            self = .array(a)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    /// Integral decimals within `Int64` are integers, so `1.0` and `1` are one value.
    static func exact(_ n: Decimal) -> JSONValue {
        var value = n
        var whole = Decimal()
        NSDecimalRound(&whole, &value, 0, .plain)
        // Through the digits, not `int64Value`: that goes through `Double` and turns 9223372036854775807.0 into 0.
        if whole == n, let integer = Int64(whole.description) { return .integer(integer) }
        return .number(n)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let b): try container.encode(b)
        case .integer(let n): try container.encode(n)
        case .number(let n): try container.encode(n)
        case .string(let s): try container.encode(s)
        case .array(let a): try container.encode(a)
        case .object(let o): try container.encode(o)
        }
    }

    /// Canonical JSON text.
    var canonicalText: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? String(decoding: encoder.encode(self), as: UTF8.self)) ?? "null"
    }

    static func parse(_ text: String?) -> JSONValue? {
        guard let text else { return nil }
        return try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
    }
}

/// The top-level fields of an encodable request, each as canonical JSON text (for idempotency comparisons).
func canonicalFields<T: Encodable>(_ value: T, extra: [String: String] = [:]) -> [String: String] {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    guard let data = try? encoder.encode(value), case .object(let object)? = try? JSONDecoder().decode(JSONValue.self, from: data) else {
        return extra
    }
    var fields = extra
    for (key, field) in object where field != .null { fields[key] = field.canonicalText }
    return fields
}
