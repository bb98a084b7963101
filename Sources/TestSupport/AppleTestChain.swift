import Crypto
import Foundation
import SwiftASN1
import X509

/// A certificate chain shaped like Apple's (P-384 root and intermediate, P-256 leaf, Apple's marker OIDs) for
/// signing StoreKit payloads in tests, with switches to break each property the verifier checks.
public struct AppleTestChain: Sendable {
    public let root: Certificate
    public let intermediate: Certificate
    public let leaf: Certificate
    let leafKey: P256.Signing.PrivateKey

    public static let leafOID: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 11, 1]
    public static let intermediateOID: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 2, 1]

    public init(
        rootName: String = "Test Apple Root", leafOID: Bool = true, intermediateOID: Bool = true,
        leafValidity: ClosedRange<Date> = Date(timeIntervalSinceNow: -86400 * 30)...Date(timeIntervalSinceNow: 86400 * 365 * 5)
    ) throws {
        let rootKey = P384.Signing.PrivateKey()
        let intermediateKey = P384.Signing.PrivateKey()
        leafKey = P256.Signing.PrivateKey()
        let now = Date()
        let rootDN = try DistinguishedName { CommonName(rootName) }
        let intermediateDN = try DistinguishedName { CommonName("Test WWDR Intermediate") }
        let leafDN = try DistinguishedName { CommonName("Test Receipt Signing") }
        root = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(rootKey.publicKey), notValidBefore: now - 86400 * 3650,
            notValidAfter: now + 86400 * 3650, issuer: rootDN, subject: rootDN, signatureAlgorithm: .ecdsaWithSHA384,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true))
            }, issuerPrivateKey: .init(rootKey))
        intermediate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(intermediateKey.publicKey), notValidBefore: now - 86400 * 3650,
            notValidAfter: now + 86400 * 3650, issuer: rootDN, subject: intermediateDN, signatureAlgorithm: .ecdsaWithSHA384,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true))
                if intermediateOID { Certificate.Extension(oid: Self.intermediateOID, critical: false, value: [0x05, 0x00]) }
            }, issuerPrivateKey: .init(rootKey))
        leaf = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(leafKey.publicKey), notValidBefore: leafValidity.lowerBound,
            notValidAfter: leafValidity.upperBound, issuer: intermediateDN, subject: leafDN, signatureAlgorithm: .ecdsaWithSHA384,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                if leafOID { Certificate.Extension(oid: Self.leafOID, critical: false, value: [0x05, 0x00]) }
            }, issuerPrivateKey: .init(intermediateKey))
    }

    public var rootPEM: String { get throws { try root.serializeAsPEM().pemString } }

    public static func der(_ certificate: Certificate) throws -> Data {
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return Data(serializer.serializedBytes)
    }

    /// A compact JWS of `payload` (JSON), header `{"alg": alg, "x5c": certificates}` (default: leaf, intermediate, root).
    public func sign(json payload: [String: any Sendable], alg: String = "ES256", x5c: [Certificate]? = nil) throws -> String {
        let chain = try (x5c ?? [leaf, intermediate, root]).map { try Self.der($0).base64EncodedString() }
        let header = try JSONSerialization.data(withJSONObject: ["alg": alg, "x5c": chain], options: [.sortedKeys])
        let body = try JSONSerialization.data(withJSONObject: payload, options: [.sortedKeys])
        let signingInput = Self.base64URL(header) + "." + Self.base64URL(body)
        let signature = try leafKey.signature(for: Data(signingInput.utf8))
        return signingInput + "." + Self.base64URL(signature.rawRepresentation)
    }

    public static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(
            of: "=", with: "")
    }
}
