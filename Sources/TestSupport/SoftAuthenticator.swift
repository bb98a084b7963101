import Crypto
import CryptoExtras
import Foundation

/// A software passkey authenticator for tests: makes a credential (ES256 or RS256) and answers ceremonies as a platform
/// authenticator does, with knobs to misbehave (no user verification, another origin or rp id, a counter going back).
public struct SoftAuthenticator: Sendable {
    public enum Algorithm: Sendable { case es256, rs256 }

    public let credentialID: [UInt8]
    public let userHandle: [UInt8]
    public var rpID: String
    public var origin: String
    public var signCount: UInt32 = 0
    /// Flags: user present (0x01), user verified (0x04), backup eligible and backed up (0x08, 0x10).
    public var flags: UInt8 = 0x1d
    private let key: Key

    enum Key: @unchecked Sendable {
        case es256(P256.Signing.PrivateKey)
        case rs256(_RSA.Signing.PrivateKey)
    }

    public init(rpID: String, origin: String, userHandle: [UInt8], algorithm: Algorithm = .es256) throws {
        self.rpID = rpID
        self.origin = origin
        self.userHandle = userHandle
        self.credentialID = (0..<32).map { _ in UInt8.random(in: 0...255) }
        switch algorithm {
        case .es256: key = .es256(P256.Signing.PrivateKey())
        case .rs256: key = .rs256(try _RSA.Signing.PrivateKey(keySize: .bits2048))
        }
    }

    /// The COSE key of the credential.
    public func publicKeyCBOR() throws -> [UInt8] {
        switch key {
        case .es256(let k):
            let point = Array(k.publicKey.x963Representation)
            return CBORWriter.map([
                (.int(1), .int(2)), (.int(3), .int(-7)), (.int(-1), .int(1)), (.int(-2), .bytes(Array(point[1..<33]))),
                (.int(-3), .bytes(Array(point[33..<65]))),
            ])
        case .rs256(let k):
            let numbers = try k.publicKey.getKeyPrimitives()
            return CBORWriter.map([
                (.int(1), .int(3)), (.int(3), .int(-257)), (.int(-1), .bytes(Array(numbers.modulus))),
                (.int(-2), .bytes(Array(numbers.publicExponent))),
            ])
        }
    }

    func rpIDHash() -> [UInt8] { Array(SHA256.hash(data: Data(rpID.utf8))) }

    public func clientData(type: String, challenge: String) -> [UInt8] {
        Array(#"{"type":"\#(type)","challenge":"\#(challenge)","origin":"\#(origin)","crossOrigin":false}"#.utf8)
    }

    /// The registration response JSON for options whose challenge is `challenge` (base64url), fields as the WebAuthn
    /// JSON serialization writes them.
    public func registration(challenge: String, format: String = "none") throws -> [String: Any] {
        let authData =
            rpIDHash() + [flags | 0x40] + Self.bigEndian(signCount) + [UInt8](repeating: 0, count: 16)
            + [UInt8(credentialID.count >> 8), UInt8(credentialID.count & 0xff)] + credentialID + (try publicKeyCBOR())
        let attestation = CBORWriter.map([(.text("fmt"), .text(format)), (.text("attStmt"), .raw([0xa0])), (.text("authData"), .bytes(authData))])
        let id = Self.b64(credentialID)
        return [
            "id": id, "rawId": id, "type": "public-key",
            "response": [
                "clientDataJSON": Self.b64(clientData(type: "webauthn.create", challenge: challenge)), "attestationObject": Self.b64(attestation),
            ],
        ]
    }

    /// The sign-in response JSON; the counter moves on first (set `signCount` to replay an older one).
    public mutating func assertion(challenge: String) throws -> [String: Any] {
        signCount &+= 1
        let authData = rpIDHash() + [flags & 0x3f] + Self.bigEndian(signCount)
        let client = clientData(type: "webauthn.get", challenge: challenge)
        let signed = authData + Array(SHA256.hash(data: client))
        let signature: [UInt8]
        switch key {
        case .es256(let k): signature = Array(try k.signature(for: signed).derRepresentation)
        case .rs256(let k): signature = Array(try k.signature(for: signed, padding: .insecurePKCS1v1_5).rawRepresentation)
        }
        let id = Self.b64(credentialID)
        return [
            "id": id, "rawId": id, "type": "public-key",
            "response": [
                "clientDataJSON": Self.b64(client), "authenticatorData": Self.b64(authData), "signature": Self.b64(signature),
                "userHandle": Self.b64(userHandle),
            ],
        ]
    }

    static func bigEndian(_ n: UInt32) -> [UInt8] { [UInt8(n >> 24), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)] }

    public static func b64(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

/// A minimal CBOR encoder for building test inputs.
public enum CBORWriter {
    public indirect enum Item: Sendable {
        case int(Int64)
        case bytes([UInt8])
        case text(String)
        case array([Item])
        case map([(Item, Item)])
        /// Bytes written as they are (for malformed inputs).
        case raw([UInt8])
    }

    public static func map(_ pairs: [(Item, Item)]) -> [UInt8] { encode(.map(pairs)) }

    public static func encode(_ item: Item) -> [UInt8] {
        switch item {
        case .int(let n): return n >= 0 ? head(0, UInt64(n)) : head(1, UInt64(-1 - n))
        case .bytes(let b): return head(2, UInt64(b.count)) + b
        case .text(let t): return head(3, UInt64(t.utf8.count)) + Array(t.utf8)
        case .array(let items): return head(4, UInt64(items.count)) + items.flatMap(encode)
        case .map(let pairs): return head(5, UInt64(pairs.count)) + pairs.flatMap { encode($0.0) + encode($0.1) }
        case .raw(let b): return b
        }
    }

    public static func head(_ major: UInt8, _ n: UInt64) -> [UInt8] {
        let m = major << 5
        switch n {
        case 0..<24: return [m | UInt8(n)]
        case 24..<256: return [m | 24, UInt8(n)]
        case 256..<65536: return [m | 25, UInt8(n >> 8), UInt8(n & 0xff)]
        case 65536..<(1 << 32): return [m | 26] + (0..<4).reversed().map { UInt8(n >> (8 * UInt64($0)) & 0xff) }
        default: return [m | 27] + (0..<8).reversed().map { UInt8(n >> (8 * UInt64($0)) & 0xff) }
        }
    }
}
