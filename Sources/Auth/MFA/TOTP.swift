import Crypto
import Foundation

/// Time-based one-time codes (RFC 6238 over RFC 4226): HMAC-SHA1, 30-second steps, 6 digits, the usual authenticator
/// app defaults. swift-crypto's HMAC is the whole algorithm, so no further library is needed.
public enum TOTP {
    public static let stepSeconds: Int64 = 30
    public static let digits = 6
    /// Steps either side of now that are accepted (clock drift between phone and server).
    public static let window: Int64 = 1

    /// 20 random bytes, as authenticator apps expect.
    public static func newSecret() -> [UInt8] { SecureRandom.bytes(20) }

    public static func step(at date: Date) -> Int64 { Int64(floor(date.timeIntervalSince1970)) / stepSeconds }

    public static func code(secret: [UInt8], step: Int64) -> String {
        var counter = UInt64(step).bigEndian
        let message = withUnsafeBytes(of: &counter) { Data($0) }
        let mac = Array(HMAC<Insecure.SHA1>.authenticationCode(for: message, using: SymmetricKey(data: secret)))
        let offset = Int(mac[mac.count - 1] & 0x0f)
        let value =
            (UInt32(mac[offset] & 0x7f) << 24) | (UInt32(mac[offset + 1]) << 16) | (UInt32(mac[offset + 2]) << 8) | UInt32(mac[offset + 3])
        let text = String(value % 1_000_000)
        return String(repeating: "0", count: digits - text.count) + text
    }

    /// The step whose code `code` is, within the window around `date`, or nil.
    public static func matchingStep(secret: [UInt8], code: String, at date: Date) -> Int64? {
        guard code.utf8.count == digits, code.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        let now = step(at: date)
        var found: Int64?
        for candidate in (now - window)...(now + window)
        where SecretHasher.constantTimeEqual(Self.code(secret: secret, step: candidate), code) {
            found = candidate
        }
        return found
    }

    /// RFC 4648 base32 without padding (how authenticator apps take secrets).
    public static func base32(_ bytes: [UInt8]) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
        var out = ""
        var buffer = 0
        var bits = 0
        for byte in bytes {
            buffer = (buffer << 8) | Int(byte)
            bits += 8
            while bits >= 5 {
                out.append(alphabet[(buffer >> (bits - 5)) & 31])
                bits -= 5
            }
        }
        if bits > 0 { out.append(alphabet[(buffer << (5 - bits)) & 31]) }
        return out
    }

    public static func base32Decode(_ text: String) -> [UInt8]? {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
        var out: [UInt8] = []
        var buffer = 0
        var bits = 0
        for character in text.uppercased() where character != "=" {
            guard let value = alphabet.firstIndex(of: character) else { return nil }
            buffer = (buffer << 5) | value
            bits += 5
            if bits >= 8 {
                out.append(UInt8((buffer >> (bits - 8)) & 0xff))
                bits -= 8
            }
        }
        return out
    }
}
