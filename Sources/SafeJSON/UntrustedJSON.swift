import Foundation

/// JSON from outside (request bodies, webhook payloads, signed payloads before their signature is checked) is decoded
/// only through here: one byte scan first refuses what traps Foundation's decoder, then `JSONDecoder` decodes.
///
/// The trap: swift-foundation's integer slow path ends in a `precondition` when neither its `Double` nor its `Decimal`
/// parse of a number literal succeeds, which happens for literals of about 170 digits whose value fits the integer
/// (`1` then 170 zeros then `e-154`, for an `Int64` field): one such request stopped the process. No real client sends a
/// number of more than ``numberBytesMax`` characters, so every longer one is refused, whatever field it is in. The scan
/// reads UTF-8; Foundation also accepts UTF-16 and UTF-32, where a digit run is interleaved with zero bytes and would
/// pass unseen, so a zero byte (which valid UTF-8 JSON never holds: control characters in strings must be escaped) is
/// refused too.
public enum UntrustedJSON {
    /// The longest number literal accepted (characters, sign and exponent included).
    public static let numberBytesMax = 100
    /// The most significant digits a number may have: free-form values (metadata) keep numbers exactly as `Decimal`,
    /// which holds 38; a longer one would be rounded silently (and two requests differing past it would look the same).
    public static let significantDigitsMax = 38

    public struct Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        public let description: String
    }

    /// Throws ``Refusal`` when `bytes` hold a zero byte (UTF-16 or UTF-32 text), a number literal (outside strings)
    /// longer than ``numberBytesMax``, or an object with the same key twice: Foundation keeps the first, other parsers
    /// (a gateway's, a client library's) the last, so a body like `{"quality":"standard","quality":"ultra"}` could be
    /// priced as one thing and performed as another. Keys are compared as decoded text (`"a"` and `"\u0061"` are one key).
    public static func check(_ bytes: some Collection<UInt8>) throws(Refusal) {
        var inString = false
        var escaped = false
        var run = 0
        var digits = SignificantDigits()
        var objects = ObjectKeys()
        var index = bytes.startIndex
        var numberStart = index
        var plainNumber = true
        while index != bytes.endIndex {
            let byte = bytes[index]
            defer { bytes.formIndex(after: &index) }
            if byte == 0 { throw Refusal(description: "JSON must be UTF-8 text (a zero byte was found).") }
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                    try objects.endKey()
                    continue
                }
                objects.keyByte(byte)
                continue
            }
            if isNumberByte(byte) {
                run += 1
                if run > numberBytesMax {
                    throw Refusal(description: "A number may be at most \(numberBytesMax) characters long.")
                }
                if digits.add(byte) > significantDigitsMax {
                    throw Refusal(description: "A number may have at most \(significantDigitsMax) significant digits (it would be rounded).")
                }
                if run == 1 { (numberStart, plainNumber) = (index, true) }
                if byte == UInt8(ascii: ".") || byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E") { plainNumber = false }
                continue
            }
            if run > 0 && !plainNumber { try NumberLiteral.check(bytes[numberStart..<index]) }
            run = 0
            digits = SignificantDigits()
            switch byte {
            case UInt8(ascii: "\""):
                inString = true
                objects.startString()
            case UInt8(ascii: "{"): objects.open(isObject: true)
            case UInt8(ascii: "["): objects.open(isObject: false)
            case UInt8(ascii: "}"), UInt8(ascii: "]"): objects.close()
            case UInt8(ascii: ","): objects.nextMember()
            default: break
            }
        }
        if run > 0 && !plainNumber { try NumberLiteral.check(bytes[numberStart..<index]) }
    }

    /// A number literal with a fraction or an exponent whose value is not whole must not come out of a binary parse as
    /// a whole number: Foundation decodes an integer field through `Double`, so `4.9999999999999999999`, `1.0000000000000000001`
    /// or `1e-400` became 5, 1 and 0 in integer fields (an outside tester granted one token with `0.999…e0`), while `0.5`
    /// is refused. Such literals are refused whatever the field: no binary64 encoder writes them (the shortest round trip
    /// of a `Double` never rounds to a whole number it is not). Only literals with `.`, `e` or `E` pay for the check.
    enum NumberLiteral {
        static func check(_ literal: some Collection<UInt8>) throws(Refusal) {
            guard !isWhole(literal), let value = Double(String(decoding: literal, as: UTF8.self)), value.isFinite,
                value == value.rounded(.towardZero)
            else { return }
            throw Refusal(description: "A number with a fraction has more digits than a number holds and would be rounded to a whole number.")
        }

        /// Whether the literal's digits denote a whole number (`1.50e1`, `100e-2`, `0.0`), decided on the digits alone.
        static func isWhole(_ literal: some Collection<UInt8>) -> Bool {
            var mantissa: [UInt8] = []
            var fractionDigits = 0
            var exponent = 0
            var exponentSign = 1
            var part = 0  // 0 whole digits, 1 fraction, 2 exponent
            for byte in literal {
                switch byte {
                case UInt8(ascii: "."): part = 1
                case UInt8(ascii: "e"), UInt8(ascii: "E"): part = 2
                case UInt8(ascii: "-") where part == 2: exponentSign = -1
                case UInt8(ascii: "0")...UInt8(ascii: "9"):
                    if part == 2 {
                        exponent = min(exponent * 10 + Int(byte - UInt8(ascii: "0")), 1_000_000)
                    } else {
                        mantissa.append(byte)
                        if part == 1 { fractionDigits += 1 }
                    }
                default: break
                }
            }
            guard let lastNonZero = mantissa.lastIndex(where: { $0 != UInt8(ascii: "0") }) else { return true }
            let trailingZeros = mantissa.count - 1 - lastNonZero
            return exponentSign * exponent - fractionDigits + trailingZeros >= 0
        }
    }

    /// The significant digits of the number literal being read: from its first non-zero digit to its last, exponent
    /// left out (`1000e5` has one, `0.00120` two).
    struct SignificantDigits {
        private var count = 0
        private var zeros = 0
        private var inExponent = false

        mutating func add(_ byte: UInt8) -> Int {
            switch byte {
            case UInt8(ascii: "e"), UInt8(ascii: "E"): inExponent = true
            case UInt8(ascii: "0") where !inExponent: if count > 0 { zeros += 1 }
            case UInt8(ascii: "1")...UInt8(ascii: "9") where !inExponent:
                count += zeros + 1
                zeros = 0
            default: break
            }
            return count
        }
    }

    /// The keys seen in each open object, innermost last (arrays hold no keys). Compared as Swift strings, so keys a
    /// decoded dictionary would merge (`é` written precomposed and as `e` with a combining accent) are duplicates too.
    struct ObjectKeys {
        private var frames: [(isObject: Bool, expectingKey: Bool, keys: Set<String>)] = []
        private var key: [UInt8]?

        mutating func open(isObject: Bool) { frames.append((isObject, isObject, [])) }
        mutating func close() { _ = frames.popLast() }
        mutating func nextMember() {
            if let last = frames.indices.last, frames[last].isObject { frames[last].expectingKey = true }
        }
        /// A string starts: it is a key when an object expects one.
        mutating func startString() {
            guard let last = frames.indices.last, frames[last].isObject, frames[last].expectingKey else { return }
            frames[last].expectingKey = false
            key = []
        }
        mutating func keyByte(_ byte: UInt8) { key?.append(byte) }
        mutating func endKey() throws(Refusal) {
            guard let raw = key, let last = frames.indices.last else { return }
            key = nil
            let text = raw.contains(UInt8(ascii: "\\")) ? Self.unescaped(raw) : raw
            guard frames[last].keys.insert(String(decoding: text, as: UTF8.self)).inserted else {
                let shown = String(decoding: text.prefix(64), as: UTF8.self).unicodeScalars.filter { $0.value >= 0x20 && $0 != "\"" }
                throw Refusal(description: "The key \"\(String(String.UnicodeScalarView(shown)))\" appears twice in one object.")
            }
        }

        /// A key's text with its escapes decoded (the raw bytes when they do not decode).
        static func unescaped(_ raw: [UInt8]) -> [UInt8] {
            guard let text = try? JSONDecoder().decode(String.self, from: Data([UInt8(ascii: "\"")] + raw + [UInt8(ascii: "\"")])) else { return raw }
            return Array(text.utf8)
        }
    }

    /// ``check(_:)``, then `decoder.decode`.
    public static func decode<T: Decodable>(_ type: T.Type, from data: Data, decoder: JSONDecoder = JSONDecoder()) throws -> T {
        try check(data)
        return try decoder.decode(type, from: data)
    }

    private static func isNumberByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "+"), UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E"):
            true
        default:
            false
        }
    }
}
