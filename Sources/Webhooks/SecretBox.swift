import Crypto
import Foundation

/// Seals endpoint secrets at rest: AES-GCM under a key derived (HKDF-SHA256) from the server secret. A database dump
/// alone does not reveal a secret; a wrong server secret fails to open it (and deliveries then fail loudly).
public struct SecretBox: Sendable {
    let key: SymmetricKey

    public init(serverSecret: [UInt8]) {
        key = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: serverSecret), info: Data("account-service webhook secrets v1".utf8), outputByteCount: 32)
    }

    public func seal(_ text: String) throws -> String {
        try AES.GCM.seal(Data(text.utf8), using: key).combined!.base64EncodedString()
    }

    public func open(_ sealed: String) throws -> String {
        guard let data = Data(base64Encoded: sealed) else { throw WebhookError.invalid("sealed secret is not base64") }
        return String(decoding: try AES.GCM.open(AES.GCM.SealedBox(combined: data), using: key), as: UTF8.self)
    }
}
