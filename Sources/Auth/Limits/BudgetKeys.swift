import Foundation
import Networks
import Storage

/// The keys of the auth flows' attempt budgets. Addresses appear only as keyed hashes (``SecretHasher/addressKey(_:)``).
struct BudgetKeys: Sendable {
    let secrets: SecretHasher

    /// The ``RowLanes`` key of an address's unauthenticated mail flows (sign-up, resend-otp, forgot-password): they lock
    /// its mail budget, code and account rows, so a flood naming one address holds a few connections, not the pool.
    static func address(_ email: String) -> String { "address:" + email }
    /// Password checks for an address: sign-in and every check behind a session share it.
    func password(email: String) -> String { "password:" + secrets.addressKey(email) }
    /// Second-factor tries for an account (TOTP and recovery codes): cleared only by a right second factor, never by a
    /// right password, so password sign-ins cannot refill it.
    func secondFactor(userID: String) -> String { "mfa:" + userID }
    /// Failed sign-ins from one client network (``clientNetwork(_:)``).
    func network(ip: String) -> String { "signin-ip:" + Self.clientNetwork(ip) }
    /// Unauthenticated Argon2 runs from one client network.
    func hashing(ip: String) -> String { "hash-ip:" + Self.clientNetwork(ip) }

    /// What one client controls (``IPNetwork/client(_:)``).
    static func clientNetwork(_ ip: String) -> String { IPNetwork.client(ip) }
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
