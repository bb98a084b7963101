import Crypto
import CryptoExtras
import Foundation

/// A credential's public key as its authenticator wrote it (RFC 9052 COSE_Key): ES256 (EC2 on P-256) or RS256
/// (RSASSA-PKCS1-v1_5 with SHA-256, 2048 to 4096 bits). Other algorithms and curves are refused.
public enum COSEKey: Sendable {
    case es256(P256.Signing.PublicKey)
    case rs256(_RSA.Signing.PublicKey)

    /// COSE algorithm identifiers, as `pubKeyCredParams` offers them.
    public static let es256Algorithm: Int64 = -7
    public static let rs256Algorithm: Int64 = -257

    public var algorithm: Int64 {
        switch self {
        case .es256: return Self.es256Algorithm
        case .rs256: return Self.rs256Algorithm
        }
    }

    /// Reads a COSE key from its CBOR bytes (as stored).
    public init(cbor bytes: [UInt8]) throws(WebAuthnError) {
        let item: CBOR
        do { item = try CBORDecoder.decode(bytes) } catch { throw .malformed("credential public key: \(error)") }
        try self.init(item)
    }

    init(_ key: CBOR) throws(WebAuthnError) {
        guard case .map = key else { throw .malformed("the credential public key is not a CBOR map") }
        switch (key[1]?.integer, key[3]?.integer) {
        case (2, Self.es256Algorithm):
            guard key[-1]?.integer == 1 else { throw .unsupported("only the P-256 curve is accepted for ES256") }
            guard case .bytes(let x) = key[-2], case .bytes(let y) = key[-3], x.count == 32, y.count == 32 else {
                throw .malformed("an ES256 key needs 32-byte x and y coordinates")
            }
            do { self = .es256(try P256.Signing.PublicKey(x963Representation: [0x04] + x + y)) } catch {
                throw .malformed("the ES256 key is not a point on P-256")
            }
        case (3, Self.rs256Algorithm):
            guard case .bytes(let n) = key[-1], case .bytes(let e) = key[-2], (256...512).contains(n.count), (1...8).contains(e.count) else {
                throw .malformed("an RS256 key needs a 2048- to 4096-bit modulus and a short exponent")
            }
            do { self = .rs256(try _RSA.Signing.PublicKey(n: n, e: e)) } catch { throw .malformed("the RS256 key is not a valid RSA key") }
        case (let kty, let alg):
            throw .unsupported(
                "credential key type \(kty.map(String.init) ?? "?") with algorithm \(alg.map(String.init) ?? "?"); ES256 (-7) and RS256 (-257) are accepted"
            )
        }
    }

    /// Whether `signature` signs `data` (authenticator data followed by the client data's SHA-256).
    public func isValidSignature(_ signature: [UInt8], for data: [UInt8]) -> Bool {
        switch self {
        case .es256(let key):
            guard let parsed = try? P256.Signing.ECDSASignature(derRepresentation: signature) else { return false }
            return key.isValidSignature(parsed, for: data)
        case .rs256(let key):
            return key.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: signature), for: data, padding: .insecurePKCS1v1_5)
        }
    }
}
