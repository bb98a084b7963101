/// Answers whose optional fields are always present: `nil` is written as `null` (synthesized `Encodable` leaves the key
/// out), except for the fields in `omittedWhenNil`. Conforming types get an `encode(to:)` that writes every stored
/// property, in declaration order.
protocol ExplicitNulls: Encodable {
    static var omittedWhenNil: Set<String> { get }
}

extension ExplicitNulls {
    static var omittedWhenNil: Set<String> { [] }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: AnyKey.self)
        for child in Mirror(reflecting: self).children {
            guard let label = child.label else { continue }
            if let value = Self.unwrapped(child.value) as? any Encodable {
                try container.encode(value, forKey: AnyKey(stringValue: label))
            } else if !Self.omittedWhenNil.contains(label) {
                try container.encodeNil(forKey: AnyKey(stringValue: label))
            }
        }
    }

    /// The wrapped value of an `Optional` (nil for `.none`), or the value itself.
    static func unwrapped(_ value: Any) -> Any? {
        let mirror = Mirror(reflecting: value)
        guard mirror.displayStyle == .optional else { return value }
        return mirror.children.first.map { unwrapped($0.value) } ?? nil
    }
}

struct AnyKey: CodingKey {
    let stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}
