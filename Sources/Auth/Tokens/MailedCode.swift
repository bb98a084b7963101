import Foundation

/// What a sign-up or reset mail carries, and how a typed code is told apart:
/// - the short code: six digits, easy to type and so easy to guess. Each address's checks are budgeted (five per code),
///   and the fifth wrong one burns it;
/// - the long code: 43 characters (256 bits), mailed with it for a link or a paste. Nobody can guess it, so checking it
///   draws on no budget (``AuthService/reserveCheck(_:_:email:logger:)``), and burning the short code leaves it working. An outside
///   tester who knew only an address kept its owner from resetting her password by guessing the short code wrong five
///   times, again and again (628 requests, two resets typed 3 s after the mail arrived both refused).
struct MailedCode: Sendable {
    let short: String
    let long: String

    static func new() -> MailedCode { MailedCode(short: SecretHasher.newCode(), long: SecretHasher.newSessionToken()) }

    /// The keyed hashes stored for the two codes (`code_hmac`, `link_hmac`).
    func hmacs(_ secrets: SecretHasher, email: String, purpose: CodePurpose) -> (short: String, long: String) {
        (TypedCode.short(short).hmac(secrets, email: email, purpose: purpose), TypedCode.long(long).hmac(secrets, email: email, purpose: purpose))
    }
}

/// A code as typed: the short or the long one of a ``MailedCode``.
enum TypedCode: Sendable {
    case short(String)
    case long(String)

    /// 400 unless it has the shape of either code (spaces and line breaks around it, as a paste brings, are dropped).
    init(_ typed: String) throws {
        let code = typed.utf8.count <= 128 ? typed.trimmingCharacters(in: .whitespacesAndNewlines) : typed
        let bytes = code.utf8
        if bytes.count == 6, bytes.allSatisfy({ (0x30...0x39).contains($0) }) {
            self = .short(code)
        } else if bytes.count == 43, bytes.allSatisfy(Self.isBase64URL) {
            self = .long(code)
        } else {
            throw AuthError.validation("The code is the 6 digits from the mail (or the long code under them).")
        }
    }

    static func isBase64URL(_ byte: UInt8) -> Bool {
        (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) || byte == 0x2D || byte == 0x5F
    }

    var isLong: Bool { if case .long = self { true } else { false } }

    /// The column that holds this kind of code's hash.
    var column: String { isLong ? "link_hmac" : "code_hmac" }

    func hmac(_ secrets: SecretHasher, email: String, purpose: CodePurpose) -> String {
        switch self {
        case .short(let code): secrets.codeHMAC(code: code, email: email, purpose: purpose.rawValue)
        case .long(let code): secrets.codeHMAC(code: code, email: email, purpose: purpose.rawValue + ":long")
        }
    }
}
