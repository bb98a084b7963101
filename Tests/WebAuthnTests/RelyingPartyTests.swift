import Crypto
import Foundation
import TestSupport
import Testing

@testable import WebAuthn

@Suite("The relying party's checks")
struct RelyingPartyTests {
    let party = RelyingParty(id: "example.com", name: "Example", origins: ["https://example.com", "https://app.example.com"])

    func parts(_ answer: [String: Any]) throws -> [String: [UInt8]] {
        let response = try #require(answer["response"] as? [String: String])
        return try response.mapValues { try #require(Base64URL.decode($0, bytesMax: 16_384)) }
    }

    @Test(arguments: [SoftAuthenticator.Algorithm.es256, .rs256])
    func registersAndVerifiesBothAlgorithms(algorithm: SoftAuthenticator.Algorithm) throws {
        var device = try SoftAuthenticator(rpID: "example.com", origin: "https://app.example.com", userHandle: [9], algorithm: algorithm)
        let created = try parts(try device.registration(challenge: Base64URL.encode([1, 2, 3])))
        #expect(try party.challenge(inClientData: try #require(created["clientDataJSON"]), ceremony: .create) == [1, 2, 3])
        let credential = try party.registration(attestationObject: try #require(created["attestationObject"]))
        #expect(credential.id == device.credentialID)
        #expect(credential.algorithm == (algorithm == .es256 ? -7 : -257))
        #expect(credential.backupEligible && credential.backedUp)
        let key = try COSEKey(cbor: credential.publicKey)

        let signed = try parts(try device.assertion(challenge: Base64URL.encode([7])))
        let data = try party.assertion(
            authenticatorData: try #require(signed["authenticatorData"]), clientData: try #require(signed["clientDataJSON"]),
            signature: try #require(signed["signature"]), key: key)
        #expect(data.signCount == 1)
        // One flipped bit of the signed bytes: refused.
        var tampered = try #require(signed["authenticatorData"])
        tampered[36] ^= 1
        #expect(throws: WebAuthnError.rejected("the passkey's signature does not verify")) {
            try party.assertion(
                authenticatorData: tampered, clientData: try #require(signed["clientDataJSON"]), signature: try #require(signed["signature"]),
                key: key)
        }
    }

    @Test func refusesAnotherOriginCeremonyOrSite() throws {
        var device = try SoftAuthenticator(rpID: "example.com", origin: "https://evil.example.net", userHandle: [1])
        let created = try parts(try device.registration(challenge: "AQ"))
        #expect(throws: WebAuthnError.self) { try party.challenge(inClientData: try #require(created["clientDataJSON"]), ceremony: .create) }
        device.origin = "https://example.com"
        let signed = try parts(try device.assertion(challenge: "AQ"))
        // An assertion's client data offered as a registration's.
        #expect(throws: WebAuthnError.self) { try party.challenge(inClientData: try #require(signed["clientDataJSON"]), ceremony: .create) }
        // A credential made for another relying party id.
        device.rpID = "example.net"
        let other = try parts(try device.registration(challenge: "AQ"))
        #expect(throws: WebAuthnError.mismatch("the passkey is for another relying party id than 'example.com'")) {
            try party.registration(attestationObject: try #require(other["attestationObject"]))
        }
        // Cross-origin client data.
        let cross = Array(#"{"type":"webauthn.get","challenge":"AQ","origin":"https://example.com","crossOrigin":true}"#.utf8)
        #expect(throws: WebAuthnError.self) { try party.challenge(inClientData: cross, ceremony: .get) }
        // Client data with a repeated key is refused, not read either way.
        let repeated = Array(#"{"type":"webauthn.get","challenge":"AQ","origin":"https://example.com","origin":"https://evil.com"}"#.utf8)
        #expect(throws: WebAuthnError.self) { try party.challenge(inClientData: repeated, ceremony: .get) }
    }

    @Test func requiresUserVerificationAndNoneAttestation() throws {
        var device = try SoftAuthenticator(rpID: "example.com", origin: "https://example.com", userHandle: [1])
        device.flags = 0x01  // present, not verified
        let created = try parts(try device.registration(challenge: "AQ"))
        #expect(throws: WebAuthnError.rejected("the authenticator did not verify the user (user verification is required)")) {
            try party.registration(attestationObject: try #require(created["attestationObject"]))
        }
        device.flags = 0x05
        let packed = try parts(try device.registration(challenge: "AQ", format: "packed"))
        #expect(throws: WebAuthnError.self) { try party.registration(attestationObject: try #require(packed["attestationObject"])) }
    }

    @Test func refusesKeysItDoesNotSupport() throws {
        let ed25519 = CBORWriter.map([
            (.int(1), .int(1)), (.int(3), .int(-8)), (.int(-1), .int(6)), (.int(-2), .bytes([UInt8](repeating: 1, count: 32))),
        ])
        #expect(throws: WebAuthnError.self) { try COSEKey(cbor: ed25519) }
        let offCurve = CBORWriter.map([
            (.int(1), .int(2)), (.int(3), .int(-7)), (.int(-1), .int(1)), (.int(-2), .bytes([UInt8](repeating: 1, count: 32))),
            (.int(-3), .bytes([UInt8](repeating: 2, count: 32))),
        ])
        #expect(throws: WebAuthnError.malformed("the ES256 key is not a point on P-256")) { try COSEKey(cbor: offCurve) }
        let smallRSA = CBORWriter.map([
            (.int(1), .int(3)), (.int(3), .int(-257)), (.int(-1), .bytes([UInt8](repeating: 0xff, count: 128))), (.int(-2), .bytes([1, 0, 1])),
        ])
        #expect(throws: WebAuthnError.self) { try COSEKey(cbor: smallRSA) }
    }

    @Test func base64urlIsStrictAndBounded() {
        #expect(Base64URL.decode("AQID", bytesMax: 3) == [1, 2, 3])
        #expect(Base64URL.decode("AQI=", bytesMax: 3) == [1, 2])
        #expect(Base64URL.decode("-_8", bytesMax: 3) == [0xfb, 0xff])
        #expect(Base64URL.decode("AQID", bytesMax: 2) == nil)
        #expect(Base64URL.decode("A", bytesMax: 3) == nil)
        #expect(Base64URL.decode("AQ\u{0}D", bytesMax: 3) == nil)
        #expect(Base64URL.decode("AQ ID", bytesMax: 3) == nil)
        #expect(Base64URL.decode(String(repeating: "A", count: 10_000), bytesMax: 64) == nil)
        #expect(Base64URL.encode([0xfb, 0xff]) == "-_8")
    }
}
