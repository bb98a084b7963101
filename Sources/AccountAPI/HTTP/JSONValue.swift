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

/// The top-level fields of an encodable request, each as canonical JSON text (for idempotency comparisons): what
/// encoding the request with sorted keys, decoding it as ``JSONValue`` and re-encoding each non-null field gives, and it
/// must stay exactly that (records stored by earlier builds are compared with it). Plain strings, integers and booleans
/// are written directly; any other field takes that long way on its own (`CanonicalFields.Fields`), which made the
/// canonicalisation about 6 % of a spend's CPU in the service before.
func canonicalFields<T: Encodable>(_ value: T, extra: [String: String] = [:]) -> [String: String] {
    let fields = CanonicalFields.Fields()
    guard (try? value.encode(to: CanonicalFields(fields: fields))) != nil, fields.isObject, !fields.unusual else {
        return CanonicalFields.slowFields(value, extra: extra)
    }
    return extra.merging(fields.values) { _, field in field }
}

struct CanonicalFields: Encoder {
    final class Fields {
        var values: [String: String] = [:]
        var isObject = false
        /// A hand-written encoding (nested containers at the top, or none keyed): the whole request takes the long way.
        var unusual = false
    }

    /// The long way for a whole request.
    static func slowFields<T: Encodable>(_ value: T, extra: [String: String]) -> [String: String] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(value), case .object(let object)? = try? JSONDecoder().decode(JSONValue.self, from: data) else {
            return extra
        }
        var fields = extra
        for (key, field) in object where field != .null { fields[key] = field.canonicalText }
        return fields
    }
    let fields: Fields
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        fields.isObject = true
        return KeyedEncodingContainer(Container(fields: fields))
    }
    func unkeyedContainer() -> any UnkeyedEncodingContainer { Refused() }
    func singleValueContainer() -> any SingleValueEncodingContainer { Refused() }

    /// Strings of printable ASCII without `"` or `\` are their own canonical text between quotes.
    static func plain(_ text: String) -> Bool { text.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F && $0 != 0x22 && $0 != 0x5C } }

    /// The long way for one field: canonical JSON of its value as decoded from its JSON (nil: null, left out).
    static func slow<T: Encodable>(_ value: T) throws -> String? {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let decoded = try JSONDecoder().decode(JSONValue.self, from: try encoder.encode(value))
        return decoded == .null ? nil : decoded.canonicalText
    }

    struct Container<Key: CodingKey>: KeyedEncodingContainerProtocol {
        let fields: Fields
        var codingPath: [any CodingKey] { [] }

        func encodeNil(forKey key: Key) throws {}
        func encode(_ value: Bool, forKey key: Key) throws { fields.values[key.stringValue] = value ? "true" : "false" }
        func encode(_ value: String, forKey key: Key) throws {
            fields.values[key.stringValue] = CanonicalFields.plain(value) ? "\"" + value + "\"" : try CanonicalFields.slow(value)
        }
        func encode(_ value: Int, forKey key: Key) throws { fields.values[key.stringValue] = String(value) }
        func encode(_ value: Int64, forKey key: Key) throws { fields.values[key.stringValue] = String(value) }
        func encode(_ value: Int32, forKey key: Key) throws { fields.values[key.stringValue] = String(value) }
        func encode<T: Encodable>(_ value: T, forKey key: Key) throws { fields.values[key.stringValue] = try CanonicalFields.slow(value) }
        func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
            fields.unusual = true
            return KeyedEncodingContainer(Container<NestedKey>(fields: Fields()))
        }
        func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
            fields.unusual = true
            return Refused()
        }
        func superEncoder() -> any Encoder {
            fields.unusual = true
            return CanonicalFields(fields: Fields())
        }
        func superEncoder(forKey key: Key) -> any Encoder {
            fields.unusual = true
            return CanonicalFields(fields: Fields())
        }
    }

    /// A request that is not a JSON object at the top (no request type is): no fields.
    struct Refused: UnkeyedEncodingContainer, SingleValueEncodingContainer {
        var codingPath: [any CodingKey] { [] }
        var count: Int { 0 }
        func encodeNil() throws { throw EncodingError.invalidValue(0, .init(codingPath: [], debugDescription: "not an object")) }
        func encode<T: Encodable>(_ value: T) throws { throw EncodingError.invalidValue(0, .init(codingPath: [], debugDescription: "not an object")) }
        func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
            KeyedEncodingContainer(Container<NestedKey>(fields: Fields()))
        }
        func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer { self }
        func superEncoder() -> any Encoder { CanonicalFields(fields: Fields()) }
    }
}
