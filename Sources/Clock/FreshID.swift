import Foundation

/// Fresh random identifiers: RFC 9562 version-4 UUIDs, 122 random bits from the system's CSPRNG. Every id made in Swift
/// comes from here (PostgreSQL makes some of its own with `gen_random_uuid()`). Foundation's `UUID()` on Linux opens,
/// reads and closes `/dev/urandom` on every call (three system calls and a file descriptor: 2.8 % of the server's CPU
/// per PostgreSQL spend, which makes one id); this asks the kernel for two words (`getrandom`) and formats them itself.
public enum FreshID {
    /// A new id in the lowercase 8-4-4-4-12 form, e.g. `1b4e28ba-2fa1-4d2e-883f-0016d3cca427`.
    public static func uuid() -> String { format(words(), dashes: true) }

    /// A new id as 32 lowercase hex digits, without dashes (prefixed ids such as webhook ids).
    public static func hex() -> String { format(words(), dashes: false) }

    /// A new id as Foundation's `UUID` (for APIs that take one, e.g. a signed offer's nonce).
    public static func value() -> UUID {
        let (high, low) = words()
        func byte(_ word: UInt64, _ index: Int) -> UInt8 { UInt8(truncatingIfNeeded: word >> (56 - 8 * index)) }
        return UUID(
            uuid: (
                byte(high, 0), byte(high, 1), byte(high, 2), byte(high, 3), byte(high, 4), byte(high, 5), byte(high, 6), byte(high, 7),
                byte(low, 0), byte(low, 1), byte(low, 2), byte(low, 3), byte(low, 4), byte(low, 5), byte(low, 6), byte(low, 7)
            ))
    }

    /// 128 random bits, most significant byte first, with the version (4, byte 6) and variant (10, byte 8) bits set.
    private static func words() -> (UInt64, UInt64) {
        // The standard library's generator asks the kernel (getrandom(2) on Linux) for each word.
        var generator = SystemRandomNumberGenerator()
        let high = (generator.next() & 0xFFFF_FFFF_FFFF_0FFF) | 0x0000_0000_0000_4000
        let low = (generator.next() & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000
        return (high, low)
    }

    /// The 32 nibbles of `words`, most significant first, with dashes after the 8th, 12th, 16th and 20th if asked.
    private static func format(_ words: (UInt64, UInt64), dashes: Bool) -> String {
        let digits: StaticString = "0123456789abcdef"
        return String(unsafeUninitializedCapacity: 36) { out in
            guard out.count >= 36 else { return 0 }
            return digits.withUTF8Buffer { hex in
                var at = 0
                for nibble in 0..<32 {
                    if dashes && (nibble == 8 || nibble == 12 || nibble == 16 || nibble == 20) {
                        out[at] = UInt8(ascii: "-")
                        at += 1
                    }
                    let word = nibble < 16 ? words.0 : words.1
                    out[at] = hex[Int(truncatingIfNeeded: (word >> (60 - 4 * UInt64(nibble % 16))) & 0xF)]
                    at += 1
                }
                return at
            }
        }
    }
}
