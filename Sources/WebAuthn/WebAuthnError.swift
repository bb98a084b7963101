/// Why a WebAuthn ceremony's answer is refused. `malformed` and `unsupported` are the client's bytes (400); `mismatch`
/// is an answer for another site, origin, ceremony or challenge (400); `rejected` is a check of the user or the key
/// that failed (401).
public enum WebAuthnError: Error, Sendable, Equatable {
    case malformed(String)
    case unsupported(String)
    case mismatch(String)
    case rejected(String)

    public var detail: String {
        switch self {
        case .malformed(let s), .unsupported(let s), .mismatch(let s), .rejected(let s): return s
        }
    }
}
