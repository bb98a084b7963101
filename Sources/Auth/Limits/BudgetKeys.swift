import Foundation

/// The keys of the auth flows' attempt budgets. Addresses appear only as keyed hashes (``SecretHasher/addressKey(_:)``).
struct BudgetKeys: Sendable {
    let secrets: SecretHasher

    /// Password checks for an address: sign-in and every check behind a session share it.
    func password(email: String) -> String { "password:" + secrets.addressKey(email) }
    /// Second-factor tries for an account (TOTP and recovery codes): cleared only by a right second factor, never by a
    /// right password, so password sign-ins cannot refill it.
    func secondFactor(userID: String) -> String { "mfa:" + userID }
    /// Failed sign-ins from one client IP.
    func network(ip: String) -> String { "signin-ip:" + ip }
    /// Unauthenticated Argon2 runs from one client IP.
    func hashing(ip: String) -> String { "hash-ip:" + ip }
    /// PIN checks for one profile.
    static func pin(profileID: String) -> String { "pin:" + profileID }
    /// Code checks for one address and purpose.
    func code(_ purpose: CodePurpose, email: String) -> String { "code:\(purpose.rawValue):" + secrets.addressKey(email) }
    /// Mails of one purpose to one address.
    func mail(_ purpose: MailPurpose, email: String) -> String { "mail:\(purpose.rawValue):" + secrets.addressKey(email) }
}

/// The kinds of mail with a budget of their own, so one kind never starves another.
enum MailPurpose: String, Sendable {
    case verification
    case reset
    /// Security notices: someone tried to sign up with a taken address, a new device, a lock.
    case notice
}
