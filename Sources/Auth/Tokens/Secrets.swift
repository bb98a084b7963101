import Crypto
import Foundation
import Secrets
import Storage
import WebAuthn

/// Session tokens, one-time codes and the keyed hashes that stand in for them in the database.
public struct SecretHasher: Sendable {
    /// The server's HMAC key (from `SERVER_SECRET` or `data/server-secret`).
    let key: SymmetricKey
    /// Seals TOTP secrets (a key of their own, derived from the server secret once).
    let totpBox: SecretBox

    public init(serverSecret: [UInt8]) {
        self.key = SymmetricKey(data: serverSecret)
        self.totpBox = SecretBox(serverKey: key, purpose: "totp secrets")
    }

    /// 32 random bytes, base64url without padding: what the client holds as a bearer token.
    public static func newSessionToken() -> String { base64url(SecureRandom.bytes(32)) }

    /// A 6-digit code, uniformly distributed (rejection sampling, no modulo bias).
    public static func newCode() -> String {
        var generator = SystemRandomNumberGenerator()
        return String(format: "%06d", Int.random(in: 0..<1_000_000, using: &generator))
    }

    /// SHA-256 of a session token or API key (hex): enough for 256-bit random secrets.
    public static func tokenHash(_ token: String) -> String {
        var token = token
        return token.withUTF8 { hex(SHA256.hash(data: UnsafeRawBufferPointer($0))) }
    }

    /// HMAC-SHA256 of a code bound to its address and purpose: a stolen table cannot be brute-forced
    /// over the 10^6 code space without the server key.
    public func codeHMAC(code: String, email: String, purpose: String) -> String {
        Self.hex(HMAC<SHA256>.authenticationCode(for: Data("\(purpose)\u{0}\(email)\u{0}\(code)".utf8), using: key))
    }

    /// Keyed hash of a recovery code (a table that only needs to recognise it).
    func recoveryCodeHMAC(_ code: String, userID: String) -> String {
        Self.hex(HMAC<SHA256>.authenticationCode(for: Data("recovery\u{0}\(userID)\u{0}\(code)".utf8), using: key))
    }

    /// Keyed hash of an address for tables that only need to recognise it (mail budgets).
    public func addressKey(_ email: String) -> String {
        Self.hex(HMAC<SHA256>.authenticationCode(for: Data("address\u{0}\(email)".utf8), using: key))
    }

    /// Constant-time comparison of two hex digests.
    public static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8)
        let y = Array(b.utf8)
        guard x.count == y.count else { return false }
        var difference: UInt8 = 0
        for i in 0..<x.count { difference |= x[i] ^ y[i] }
        return difference == 0
    }

    static func hex(_ digest: some Sequence<UInt8>) -> String { hexString(digest) }

    public static func base64url(_ bytes: [UInt8]) -> String { Base64URL.encode(bytes) }
}
