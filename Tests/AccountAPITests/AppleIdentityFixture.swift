import Crypto
import CryptoExtras
import Foundation
import HTTPTypes
import Hummingbird
import JWTKit
import Logging
import NIOCore
import Synchronization

@testable import AccountAPI

/// Our own Apple: RSA keys, a local JWKS server (its keys switchable, or down), and identity tokens signed as Apple would.
final class AppleIdentityFixture: Sendable {
    static let clientID = "com.example.stickers"
    let keys = Mutex<[(kid: String, key: JWTKit.Insecure.RSA.PrivateKey)]>([])
    let down = Mutex(false)
    let fetches = Mutex(0)

    init() throws {
        let key = try Self.newKey()
        keys.withLock { $0 = [("apple-1", key)] }
    }

    static func newKey() throws -> JWTKit.Insecure.RSA.PrivateKey {
        try JWTKit.Insecure.RSA.PrivateKey(backing: _RSA.Signing.PrivateKey(keySize: .bits2048))
    }

    func rotate(to kid: String) throws { let key = try Self.newKey(); keys.withLock { $0 = [(kid, key)] } }

    var jwksJSON: String {
        let entries = keys.withLock { $0 }.map { entry -> String in
            let (n, e) = try! entry.key.publicKey.getKeyPrimitives()
            return #"{"kty":"RSA","kid":"\#(entry.kid)","use":"sig","alg":"RS256","n":"\#(Self.base64URL(n))","e":"\#(Self.base64URL(e))"}"#
        }
        return #"{"keys":[\#(entries.joined(separator: ","))]}"#
    }

    static func base64URL(_ data: some DataProtocol) -> String {
        Data(data).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Runs the JWKS server around `body`, which gets its URL.
    func run(_ body: @Sendable (String) async throws -> Void) async throws {
        let router = Router()
        router.get("/keys") { _, _ -> Response in
            self.fetches.withLock { $0 += 1 }
            if self.down.withLock({ $0 }) { return Response(status: .serviceUnavailable) }
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: self.jwksJSON)))
        }
        try await withLocalServer(router) { base in try await body(base + "/keys") }
    }

    /// The test app's configuration for this Apple.
    func configure(_ jwksURL: String) -> @Sendable (inout AppConfig) -> Void {
        { config in
            config.appleSignInClientIDs = [Self.clientID]
            config.appleSignInJWKSURL = jwksURL
        }
    }

    /// Claims as Apple sends them; any may be overridden or removed (`nil` values are left out).
    func claims(sub: String, email: String?, now: Date, overrides: [String: Any?] = [:]) -> [String: Any] {
        var claims: [String: Any?] = [
            "iss": "https://appleid.apple.com", "aud": Self.clientID, "sub": sub, "iat": Int(now.timeIntervalSince1970),
            "exp": Int(now.timeIntervalSince1970) + 600, "email": email, "email_verified": "true",
        ]
        for (key, value) in overrides { claims[key] = value }
        return claims.compactMapValues { $0 }
    }

    /// A compact JWS: RS256 with the current key (or `key`/`kid`), or the header and signature given.
    func token(_ claims: [String: Any], kid: String? = nil, key: JWTKit.Insecure.RSA.PrivateKey? = nil, alg: String = "RS256") throws -> String {
        let current = keys.withLock { $0[0] }
        let header = Self.base64URL(
            try JSONSerialization.data(withJSONObject: ["alg": alg, "kid": kid ?? current.kid, "typ": "JWT"], options: .sortedKeys))
        let payload = Self.base64URL(try JSONSerialization.data(withJSONObject: claims, options: .sortedKeys))
        let input = Data("\(header).\(payload)".utf8)
        let signature: Data
        switch alg {
        case "RS256":
            let signer = try _RSA.Signing.PrivateKey(derRepresentation: (key ?? current.key).derRepresentation)
            signature = try signer.signature(for: SHA256.hash(data: input), padding: _RSA.Signing.Padding.insecurePKCS1v1_5).rawRepresentation
        case "HS256":
            // Algorithm confusion: the public key's bytes as an HMAC secret.
            let secret = SymmetricKey(data: Data(current.key.publicKey.pemRepresentation.utf8))
            signature = Data(HMAC<SHA256>.authenticationCode(for: input, using: secret))
        default:
            signature = Data()
        }
        return "\(header).\(payload).\(Self.base64URL(signature))"
    }

    /// A server-to-server notification's JWT.
    func notification(type: String, sub: String, now: Date, jti: String = UUID().uuidString) throws -> String {
        let events = #"{"type":"\#(type)","sub":"\#(sub)","event_time":\#(Int(now.timeIntervalSince1970) * 1000)}"#
        return try token([
            "iss": "https://appleid.apple.com", "aud": Self.clientID, "iat": Int(now.timeIntervalSince1970), "jti": jti,
            "events": events,
        ])
    }
}
