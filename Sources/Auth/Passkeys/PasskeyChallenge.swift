import Crypto
import Foundation
import Storage

/// WebAuthn challenges, issued without storage: 42 bytes = version, purpose, expiry (ms, big-endian), 16 random bytes
/// and a 16-byte HMAC under the server key over all of them and the account (none for sign-in). Checking one needs no
/// database; using one writes its hash to `webauthn_used_challenges`, so each works once (``PasskeyStore/useChallenge``).
/// A sign-in's options therefore cost nothing to ask for, and no one can fill a table by asking.
struct PasskeyChallenge {
    enum Purpose: UInt8 {
        case register = 1
        case signIn = 2
    }

    /// WebAuthn's `timeout` and the challenge's life.
    static let lifetimeSeconds: Double = 300
    static let byteCount = 42

    static func issue(_ purpose: Purpose, userID: String, now: Date, secrets: SecretHasher) -> (bytes: [UInt8], expiresAt: Date) {
        let expiresAt = now.addingTimeInterval(lifetimeSeconds)
        let ms = UInt64(max(0, expiresAt.timeIntervalSince1970 * 1000))
        var body: [UInt8] = [1, purpose.rawValue]
        for shift in stride(from: 56, through: 0, by: -8) { body.append(UInt8(ms >> UInt64(shift) & 0xff)) }
        body += SecureRandom.bytes(16)
        return (body + mac(body, userID: userID, secrets: secrets), expiresAt)
    }

    /// The challenge's expiry, when it is one this server issued for this purpose and account and it has not expired.
    static func check(_ bytes: [UInt8], _ purpose: Purpose, userID: String, now: Date, secrets: SecretHasher) throws(AuthError) -> Date {
        guard bytes.count == byteCount, bytes[0] == 1, bytes[1] == purpose.rawValue else {
            throw .validation("The answer signs a challenge this service did not issue for this ceremony; ask for new options.")
        }
        let body = Array(bytes[0..<26])
        let expected = mac(body, userID: userID, secrets: secrets)
        var difference: UInt8 = 0
        for (a, b) in zip(expected, bytes[26...]) { difference |= a ^ b }
        guard difference == 0 else {
            throw .validation("The answer signs a challenge this service did not issue for this ceremony; ask for new options.")
        }
        let ms = bytes[2..<10].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let expiresAt = Date(timeIntervalSince1970: Double(ms) / 1000)
        guard expiresAt > now else { throw .validation("The challenge has expired (it lives 5 minutes); ask for new options.") }
        return expiresAt
    }

    /// What `webauthn_used_challenges` keeps of a used challenge.
    static func hash(_ bytes: [UInt8]) -> String { hexString(SHA256.hash(data: bytes)) }

    static func mac(_ body: [UInt8], userID: String, secrets: SecretHasher) -> [UInt8] {
        Array(HMAC<SHA256>.authenticationCode(for: Array("webauthn challenge\u{0}".utf8) + body + Array(userID.utf8), using: secrets.key).prefix(16))
    }
}
