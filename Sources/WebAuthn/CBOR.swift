/// A CBOR data item (RFC 8949), as much of it as WebAuthn uses: attestation objects, COSE keys, extension maps.
public indirect enum CBOR: Sendable, Equatable {
    case unsigned(UInt64)
    /// The value -1 - n (CBOR's major type 1 carries n).
    case negative(UInt64)
    case bytes([UInt8])
    case text(String)
    case array([CBOR])
    /// Pairs in the order written; keys are unique (a repeated key is refused while decoding).
    case map([(key: CBOR, value: CBOR)])
    case bool(Bool)
    case null
    case undefined

    public static func == (a: CBOR, b: CBOR) -> Bool {
        switch (a, b) {
        case (.unsigned(let x), .unsigned(let y)), (.negative(let x), .negative(let y)): return x == y
        case (.bytes(let x), .bytes(let y)): return x == y
        case (.text(let x), .text(let y)): return x.utf8.elementsEqual(y.utf8)
        case (.array(let x), .array(let y)): return x == y
        case (.map(let x), .map(let y)): return x.count == y.count && zip(x, y).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        case (.bool(let x), .bool(let y)): return x == y
        case (.null, .null), (.undefined, .undefined): return true
        default: return false
        }
    }

    /// The integer value of `.unsigned` and `.negative` items that fit an `Int64`.
    public var integer: Int64? {
        switch self {
        case .unsigned(let n): return n <= UInt64(Int64.max) ? Int64(n) : nil
        case .negative(let n): return n <= UInt64(Int64.max) ? -1 - Int64(n) : nil
        default: return nil
        }
    }

    /// The value under an integer key of a map (COSE keys use integer labels).
    public subscript(label: Int64) -> CBOR? {
        guard case .map(let pairs) = self else { return nil }
        return pairs.first { $0.key.integer == label }?.value
    }

    /// The value under a text key of a map.
    public subscript(key: String) -> CBOR? {
        guard case .map(let pairs) = self else { return nil }
        return pairs.first { if case .text(let k) = $0.key { k.utf8.elementsEqual(key.utf8) } else { false } }?.value
    }
}

/// Why bytes are not the CBOR WebAuthn expects. Never a trap: every length is checked against what is left first.
public struct CBORError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// A bounded CBOR decoder for bytes from outside. Refused: indefinite lengths and tags (WebAuthn's CTAP2 encoding has
/// neither), floats and other simple values, text that is not UTF-8, repeated map keys, nesting deeper than
/// `depthMax`, more than `itemsMax` items in all, and any length beyond the bytes that are there.
public struct CBORDecoder {
    public static let depthMax = 16
    public static let itemsMax = 1_024

    private let bytes: [UInt8]
    private var offset = 0
    private var items = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// Decodes exactly one item that fills all of `bytes`.
    public static func decode(_ bytes: [UInt8]) throws(CBORError) -> CBOR {
        let (item, used) = try decodePrefix(bytes)
        guard used == bytes.count else { throw CBORError("\(bytes.count - used) bytes follow the CBOR item") }
        return item
    }

    /// Decodes the first item of `bytes`; returns it and how many bytes it took (authenticator data carries a COSE key
    /// followed by an extensions map, with no length of its own).
    public static func decodePrefix(_ bytes: [UInt8]) throws(CBORError) -> (CBOR, Int) {
        var decoder = CBORDecoder(bytes)
        let item = try decoder.item(depth: 0)
        return (item, decoder.offset)
    }

    private mutating func byte() throws(CBORError) -> UInt8 {
        guard offset < bytes.count else { throw CBORError("the CBOR ends early") }
        defer { offset += 1 }
        return bytes[offset]
    }

    private mutating func take(_ count: UInt64) throws(CBORError) -> ArraySlice<UInt8> {
        guard count <= UInt64(bytes.count - offset) else { throw CBORError("a CBOR length (\(count)) runs past the end") }
        let end = offset + Int(count)
        defer { offset = end }
        return bytes[offset..<end]
    }

    /// The argument of a head: the additional information itself (0–23) or the 1, 2, 4 or 8 bytes after it.
    private mutating func argument(_ info: UInt8) throws(CBORError) -> UInt64 {
        switch info {
        case 0..<24: return UInt64(info)
        case 24, 25, 26, 27:
            var value: UInt64 = 0
            for byte in try take(1 << UInt64(info - 24)) { value = value << 8 | UInt64(byte) }
            return value
        case 31: throw CBORError("indefinite-length CBOR items are not accepted")
        default: throw CBORError("reserved CBOR additional information \(info)")
        }
    }

    private mutating func item(depth: Int) throws(CBORError) -> CBOR {
        guard depth <= Self.depthMax else { throw CBORError("CBOR nested deeper than \(Self.depthMax)") }
        items += 1
        guard items <= Self.itemsMax else { throw CBORError("more than \(Self.itemsMax) CBOR items") }
        let head = try byte()
        let major = head >> 5
        let info = head & 0x1f
        if major == 7 {
            switch info {
            case 20: return .bool(false)
            case 21: return .bool(true)
            case 22: return .null
            case 23: return .undefined
            default: throw CBORError("CBOR floats and simple value \(info) are not accepted")
            }
        }
        let argument = try argument(info)
        switch major {
        case 0: return .unsigned(argument)
        case 1: return .negative(argument)
        case 2: return .bytes(Array(try take(argument)))
        case 3:
            let utf8 = try take(argument)
            guard let text = String(validating: utf8, as: UTF8.self) else { throw CBORError("CBOR text that is not UTF-8") }
            return .text(text)
        case 4:
            // Each element takes at least one byte: a count beyond what is left is refused before anything is reserved.
            guard argument <= UInt64(bytes.count - offset) else { throw CBORError("a CBOR array of \(argument) items runs past the end") }
            var elements: [CBOR] = []
            for _ in 0..<argument { elements.append(try item(depth: depth + 1)) }
            return .array(elements)
        case 5:
            guard argument <= UInt64(bytes.count - offset) / 2 else { throw CBORError("a CBOR map of \(argument) pairs runs past the end") }
            var pairs: [(key: CBOR, value: CBOR)] = []
            for _ in 0..<argument {
                let key = try item(depth: depth + 1)
                guard !pairs.contains(where: { $0.key == key }) else { throw CBORError("a CBOR map repeats a key") }
                pairs.append((key, try item(depth: depth + 1)))
            }
            return .map(pairs)
        default: throw CBORError("CBOR tags are not accepted")
        }
    }
}
