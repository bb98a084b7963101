import Crypto
import Foundation

/// Signatures per the Standard Webhooks spec (https://www.standardwebhooks.com): `webhook-signature` carries
/// `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, one per live secret, space-separated. Secrets are `whsec_<base64>`;
/// the key is the base64-decoded part.
public enum WebhookSigner {
    public static let secretPrefix = "whsec_"

    /// A new endpoint secret: 32 random bytes.
    public static func newSecret() -> String {
        secretPrefix + Data(SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }).base64EncodedString()
    }

    /// The key bytes of a `whsec_` secret, or nil when it is not one.
    public static func key(of secret: String) -> SymmetricKey? {
        guard secret.hasPrefix(secretPrefix), let bytes = Data(base64Encoded: String(secret.dropFirst(secretPrefix.count))), bytes.count >= 16
        else { return nil }
        return SymmetricKey(data: bytes)
    }

    /// `v1,<signature>` for one secret.
    public static func signature(secret: String, id: String, timestamp: Int64, body: String) -> String? {
        guard let key = key(of: secret) else { return nil }
        let mac = HMAC<SHA256>.authenticationCode(for: Data("\(id).\(timestamp).\(body)".utf8), using: key)
        return "v1," + Data(mac).base64EncodedString()
    }

    /// The `webhook-signature` header value: one signature per secret (the current one first).
    public static func header(secrets: [String], id: String, timestamp: Int64, body: String) -> String {
        secrets.compactMap { signature(secret: $0, id: id, timestamp: timestamp, body: body) }.joined(separator: " ")
    }

    /// What a receiver does: true when one of the header's `v1` signatures matches `secret` (constant-time compare).
    public static func verify(secret: String, id: String, timestamp: Int64, body: String, header: String) -> Bool {
        guard let key = key(of: secret) else { return false }
        let message = Data("\(id).\(timestamp).\(body)".utf8)
        for entry in header.split(separator: " ") {
            let parts = entry.split(separator: ",", maxSplits: 1)
            guard parts.count == 2, parts[0] == "v1", let mac = Data(base64Encoded: String(parts[1])) else { continue }
            if HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: message, using: key) { return true }
        }
        return false
    }
}
