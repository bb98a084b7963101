import Crypto
import Foundation

/// Signed, expiring media URLs: `/media/KEY?exp=UNIX&sig=HMAC` where the HMAC-SHA256 (under a key derived from
/// `SERVER_SECRET`) covers the key and the expiry. Premium files are only reachable this way; a missing, wrong or
/// expired signature is refused. Expiries are rounded up to a window, so URLs handed out within one window are equal
/// (a client's image cache and the catalog's ETag stay stable).
public struct URLSigner: Sendable {
    let key: SymmetricKey
    /// Signatures of the current window's expiry, by file key: a catalog signs thousands of URLs, and within a window
    /// they are the same every time.
    let memo = SignatureMemo()
    public let lifetimeSeconds: Int
    public let windowSeconds: Int
    /// Prefix of every media URL: `MEDIA_BASE_URL` (a CDN) or the service's own `/media`.
    public let baseURL: String

    public init(secret: Data, baseURL: String = "/media", lifetimeSeconds: Int = 3600, windowSeconds: Int = 600) {
        self.key = SymmetricKey(data: HMAC<SHA256>.authenticationCode(for: Data("media-url-v1".utf8), using: SymmetricKey(data: secret)))
        self.baseURL = baseURL
        self.lifetimeSeconds = lifetimeSeconds
        self.windowSeconds = windowSeconds
    }

    /// A public URL (free and preview files).
    public func publicURL(_ blobKey: String) -> String { "\(baseURL)/\(blobKey)" }

    /// An uploader's file namespace (``BlobStore/key(for:fileExtension:namespace:)``): keyed by the server's secret, so
    /// knowing an account's id and the bytes it uploaded does not give the key of its file.
    public func namespace(for owner: String) -> String {
        Data(HMAC<SHA256>.authenticationCode(for: Data("media-namespace:\(owner)".utf8), using: key)).map { String(format: "%02x", $0) }.joined()
    }

    /// A URL valid for at least `lifetimeSeconds` from `now`.
    public func signedURL(_ blobKey: String, now: Date) -> String {
        let earliest = Int(now.timeIntervalSince1970) + lifetimeSeconds
        let expiry = (earliest + windowSeconds - 1) / windowSeconds * windowSeconds
        let sig = memo.signature(blobKey, expiry: expiry) { signature(blobKey, expiry: expiry) }
        return "\(baseURL)/\(blobKey)?exp=\(expiry)&sig=\(sig)"
    }

    /// Whether `sig` is this service's signature of `blobKey` until `exp`, and `exp` has not passed.
    public func verify(_ blobKey: String, exp: String?, sig: String?, now: Date) -> Bool {
        // One spelling per URL (a CDN caches each spelling apart): canonical digits, unpadded base64url.
        guard let exp, let expiry = Int(exp), String(expiry) == exp, let sig, sig.count == 43, expiry > Int(now.timeIntervalSince1970),
            sig.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") })
        else { return false }
        guard let given = Data(base64URL: sig) else { return false }
        return HMAC<SHA256>.isValidAuthenticationCode(given, authenticating: Data("\(blobKey)|\(expiry)".utf8), using: key)
    }

    func signature(_ blobKey: String, expiry: Int) -> String {
        Data(HMAC<SHA256>.authenticationCode(for: Data("\(blobKey)|\(expiry)".utf8), using: key)).base64URLEncoded
    }
}

/// The signatures of one expiry (a window's), at most 100,000; a new expiry starts afresh.
final class SignatureMemo: @unchecked Sendable {
    private let lock = NSLock()
    private var expiry = 0
    private var signatures: [String: String] = [:]

    func signature(_ key: String, expiry: Int, make: () -> String) -> String {
        lock.lock()
        if expiry == self.expiry, let known = signatures[key] {
            lock.unlock()
            return known
        }
        lock.unlock()
        let made = make()
        lock.lock()
        defer { lock.unlock() }
        if expiry > self.expiry || signatures.count >= 100_000 { (self.expiry, signatures) = (expiry, [:]) }
        if expiry == self.expiry { signatures[key] = made }
        return made
    }
}

extension Data {
    var base64URLEncoded: String {
        base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(
            of: "=", with: "")
    }

    init?(base64URL: String) {
        guard base64URL.count <= 64 else { return nil }
        var text = base64URL.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        self.init(base64Encoded: text)
    }
}
