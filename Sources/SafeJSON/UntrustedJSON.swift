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

    public struct Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        public let description: String
    }

    /// Throws ``Refusal`` when `bytes` hold a zero byte (UTF-16 or UTF-32 text) or a number literal (outside strings)
    /// longer than ``numberBytesMax``.
    public static func check(_ bytes: some Collection<UInt8>) throws(Refusal) {
        var inString = false
        var escaped = false
        var run = 0
        for byte in bytes {
            if byte == 0 { throw Refusal(description: "JSON must be UTF-8 text (a zero byte was found).") }
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
                continue
            }
            if isNumberByte(byte) {
                run += 1
                if run > numberBytesMax {
                    throw Refusal(description: "A number may be at most \(numberBytesMax) characters long.")
                }
            } else {
                run = 0
                inString = byte == UInt8(ascii: "\"")
            }
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
