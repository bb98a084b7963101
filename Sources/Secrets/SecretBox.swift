import Crypto
import Foundation

/// Seals secrets that must be recovered (webhook endpoint secrets, TOTP secrets): AES-GCM under a key derived
/// (HKDF-SHA256) from the server secret and a purpose label, so a database dump alone reveals none, and a wrong server
/// secret fails to open them loudly.
public struct SecretBox: Sendable {
    let key: SymmetricKey

    public init(serverSecret: [UInt8], purpose: String = "webhook secrets") {
        self.init(serverKey: SymmetricKey(data: serverSecret), purpose: purpose)
    }

    public init(serverKey: SymmetricKey, purpose: String) {
        key = HKDF<SHA256>.deriveKey(inputKeyMaterial: serverKey, info: Data("account-service \(purpose) v1".utf8), outputByteCount: 32)
    }

    public func seal(_ text: String) throws -> String {
        // `combined` is nil only for a nonce other than the default 12 bytes.
        guard let combined = try AES.GCM.seal(Data(text.utf8), using: key).combined else { throw CryptoKitError.incorrectParameterSize }
        return combined.base64EncodedString()
    }

    public func open(_ sealed: String) throws -> String {
        guard let data = Data(base64Encoded: sealed) else { throw CryptoKitError.incorrectParameterSize }
        return String(decoding: try AES.GCM.open(AES.GCM.SealedBox(combined: data), using: key), as: UTF8.self)
    }
}
