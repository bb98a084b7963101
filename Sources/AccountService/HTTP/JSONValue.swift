import Foundation

/// Any JSON value (for free-form `metadata`), re-encoded canonically (sorted keys).
indirect enum JSONValue: Codable, Sendable, Equatable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null }
        else if let b = try? container.decode(Bool.self) { self = .bool(b) }
        else if let n = try? container.decode(Double.self) { self = .number(n) }
        else if let s = try? container.decode(String.self) { self = .string(s) }
        else if let a = try? container.decode([JSONValue].self) { self = .array(a) }
        else { self = .object(try container.decode([String: JSONValue].self)) }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let b): try container.encode(b)
        case .number(let n): if n == n.rounded(), abs(n) < 1e15 { try container.encode(Int64(n)) } else { try container.encode(n) }
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
    guard let data = try? encoder.encode(value), case .object(let object)? = try? JSONDecoder().decode(JSONValue.self, from: data) else { return extra }
    var fields = extra
    for (key, field) in object where field != .null { fields[key] = field.canonicalText }
    return fields
}
