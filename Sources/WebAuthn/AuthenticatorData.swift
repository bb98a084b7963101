/// The authenticator's signed statement (WebAuthn §6.1): the relying party's id hash, flags, the signature counter, and
/// for a new credential its id and public key. Parsed from bytes from outside; every length is checked first.
public struct AuthenticatorData: Sendable {
    /// SHA-256 of the relying party id the authenticator used.
    public let rpIDHash: [UInt8]
    public let flags: UInt8
    public let signCount: UInt32
    /// Present when the AT flag is set (registration).
    public let credential: AttestedCredential?

    public struct AttestedCredential: Sendable {
        public let aaguid: [UInt8]
        public let id: [UInt8]
        /// The COSE key's CBOR bytes, as stored.
        public let publicKey: [UInt8]
    }

    public var userPresent: Bool { flags & 0x01 != 0 }
    public var userVerified: Bool { flags & 0x04 != 0 }
    public var backupEligible: Bool { flags & 0x08 != 0 }
    public var backedUp: Bool { flags & 0x10 != 0 }

    /// WebAuthn caps credential ids at 1,023 bytes.
    public static let credentialIDBytesMax = 1_023

    public init(_ bytes: [UInt8]) throws(WebAuthnError) {
        guard bytes.count >= 37 else { throw .malformed("authenticator data is \(bytes.count) bytes; at least 37 are expected") }
        rpIDHash = Array(bytes[0..<32])
        flags = bytes[32]
        // WebAuthn: a credential that is backed up is backup eligible.
        guard flags & 0x18 != 0x10 else { throw .malformed("the authenticator data says backed up but not backup eligible") }
        signCount = bytes[33..<37].reduce(0) { $0 << 8 | UInt32($1) }
        var offset = 37
        if flags & 0x40 != 0 {
            guard bytes.count - offset >= 18 else { throw .malformed("attested credential data ends early") }
            let aaguid = Array(bytes[offset..<offset + 16])
            let idLength = Int(bytes[offset + 16]) << 8 | Int(bytes[offset + 17])
            offset += 18
            guard idLength >= 1, idLength <= Self.credentialIDBytesMax, bytes.count - offset >= idLength else {
                throw .malformed("credential id length \(idLength) is out of range")
            }
            let id = Array(bytes[offset..<offset + idLength])
            offset += idLength
            let key: CBOR
            let used: Int
            do { (key, used) = try CBORDecoder.decodePrefix(Array(bytes[offset...])) } catch { throw .malformed("credential public key: \(error)") }
            _ = try COSEKey(key)
            credential = AttestedCredential(aaguid: aaguid, id: id, publicKey: Array(bytes[offset..<offset + used]))
            offset += used
        } else {
            credential = nil
        }
        if flags & 0x80 != 0 {
            // Extension outputs: a CBOR map this service reads nothing from, but which must be well formed.
            do {
                let (extensions, used) = try CBORDecoder.decodePrefix(Array(bytes[offset...]))
                guard case .map = extensions else { throw WebAuthnError.malformed("authenticator extensions are not a CBOR map") }
                offset += used
            } catch let error as WebAuthnError { throw error } catch { throw .malformed("authenticator extensions: \(error)") }
        }
        guard offset == bytes.count else { throw .malformed("\(bytes.count - offset) unexpected bytes after the authenticator data") }
    }
}
