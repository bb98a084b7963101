import Crypto
import Foundation
import SafeJSON

/// This service as a WebAuthn relying party (WebAuthn Level 3 §7): its id (a registrable domain, `WEBAUTHN_RP_ID`) and
/// the origins its ceremonies may come from (`WEBAUTHN_ORIGINS`: the web app's `https://…` origins; an iOS app using
/// its associated domain presents `https://<rp id>`). Checks what the ceremonies' answers say; what depends on stored
/// state (which challenge was issued, the credential's key and counter) is the caller's.
public struct RelyingParty: Sendable {
    public let id: String
    public let name: String
    public let origins: Set<String>

    /// Size limits of a ceremony's parts (decoded bytes).
    public static let clientDataBytesMax = 4_096
    public static let attestationObjectBytesMax = 16_384
    public static let authenticatorDataBytesMax = 4_096
    public static let signatureBytesMax = 1_024

    public enum Ceremony: String, Sendable {
        case create = "webauthn.create"
        case get = "webauthn.get"
    }

    /// A credential the registration ceremony proved.
    public struct NewCredential: Sendable {
        public let id: [UInt8]
        public let publicKey: [UInt8]
        public let algorithm: Int64
        public let signCount: UInt32
        public let backupEligible: Bool
        public let backedUp: Bool
    }

    public init(id: String, name: String, origins: Set<String>) {
        self.id = id
        self.name = name
        self.origins = origins
    }

    struct ClientData: Decodable {
        let type: String
        let challenge: String
        let origin: String
        let crossOrigin: Bool?
    }

    /// Checks the client data (ceremony type, origin, not cross-origin) and returns the challenge it signs.
    public func challenge(inClientData bytes: [UInt8], ceremony: Ceremony) throws(WebAuthnError) -> [UInt8] {
        guard bytes.count <= Self.clientDataBytesMax else { throw .malformed("clientDataJSON is over \(Self.clientDataBytesMax) bytes") }
        let data: ClientData
        do { data = try UntrustedJSON.decode(ClientData.self, from: Data(bytes)) } catch {
            throw .malformed("clientDataJSON is not the JSON object WebAuthn defines (type, challenge, origin)")
        }
        guard data.type == ceremony.rawValue else {
            throw .mismatch("clientDataJSON.type is '\(data.type.prefix(32))'; '\(ceremony.rawValue)' was expected")
        }
        guard origins.contains(data.origin) else {
            throw .mismatch("origin '\(data.origin.prefix(100))' is not one of this service's WEBAUTHN_ORIGINS")
        }
        guard data.crossOrigin != true else { throw .mismatch("cross-origin ceremonies are not accepted") }
        guard let challenge = Base64URL.decode(data.challenge, bytesMax: 256) else { throw .malformed("clientDataJSON.challenge is not base64url") }
        return challenge
    }

    /// Checks a registration's attestation object (`none` attestation) and returns the new credential.
    public func registration(attestationObject bytes: [UInt8]) throws(WebAuthnError) -> NewCredential {
        guard bytes.count <= Self.attestationObjectBytesMax else {
            throw .malformed("attestationObject is over \(Self.attestationObjectBytesMax) bytes")
        }
        let object: CBOR
        do { object = try CBORDecoder.decode(bytes) } catch { throw .malformed("attestationObject: \(error)") }
        guard case .text(let format) = object["fmt"], case .map(let statement) = object["attStmt"], case .bytes(let raw) = object["authData"] else {
            throw .malformed("attestationObject needs fmt, attStmt and authData")
        }
        guard format == "none", statement.isEmpty else {
            throw .unsupported("attestation format '\(format.prefix(32))' is not accepted; request attestation 'none'")
        }
        let data = try checked(AuthenticatorData(raw))
        guard let credential = data.credential else { throw .malformed("the authenticator data carries no credential") }
        return NewCredential(
            id: credential.id, publicKey: credential.publicKey, algorithm: try COSEKey(cbor: credential.publicKey).algorithm,
            signCount: data.signCount, backupEligible: data.backupEligible, backedUp: data.backedUp)
    }

    /// A sign-in's authenticator data, checked on its own (size, shape, this relying party, the user present and
    /// verified): what can be checked before anything depends on which credential it names.
    public func authenticatorData(_ bytes: [UInt8]) throws(WebAuthnError) -> AuthenticatorData {
        guard bytes.count <= Self.authenticatorDataBytesMax else {
            throw .malformed("authenticatorData is over \(Self.authenticatorDataBytesMax) bytes")
        }
        return try checked(AuthenticatorData(bytes))
    }

    /// Checks a sign-in's assertion with the credential's stored key; returns the authenticator data (its counter is
    /// the caller's to compare).
    public func assertion(
        authenticatorData: [UInt8], clientData: [UInt8], signature: [UInt8], key: COSEKey
    ) throws(WebAuthnError) -> AuthenticatorData {
        guard authenticatorData.count <= Self.authenticatorDataBytesMax, signature.count <= Self.signatureBytesMax else {
            throw .malformed("authenticatorData or signature is too long")
        }
        let data = try checked(AuthenticatorData(authenticatorData))
        guard key.isValidSignature(signature, for: authenticatorData + Array(SHA256.hash(data: clientData))) else {
            throw .rejected("the passkey's signature does not verify")
        }
        return data
    }

    /// The checks both ceremonies make of the authenticator data: this relying party, the user present and verified.
    func checked(_ data: AuthenticatorData) throws(WebAuthnError) -> AuthenticatorData {
        guard data.rpIDHash == Array(SHA256.hash(data: Data(id.utf8))) else {
            throw .mismatch("the passkey is for another relying party id than '\(id)'")
        }
        guard data.userPresent, data.userVerified else {
            throw .rejected("the authenticator did not verify the user (user verification is required)")
        }
        return data
    }
}
