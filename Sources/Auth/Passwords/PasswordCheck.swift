import Clock
import Foundation
import Logging
import Storage

/// Checks a signed-in user's current password (change-password, erasing the account, PIN changes). Every check reserves an
/// attempt in the address's password budget, the one sign-in uses, before Argon2 runs: a stolen session cannot guess the
/// password faster than sign-in can, and a lock set either way applies to both.
public struct PasswordCheck: Sendable {
    let database: any Database
    let hasher: PasswordHasher
    let keys: BudgetKeys
    let clock: any TimeSource
    let policy: AuthPolicy

    init(database: any Database, hasher: PasswordHasher, secrets: SecretHasher, clock: any TimeSource, policy: AuthPolicy) {
        self.database = database
        self.hasher = hasher
        self.keys = BudgetKeys(secrets: secrets)
        self.clock = clock
        self.policy = policy
    }

    /// Throws `invalidPassword` unless `password` is the user's current one; `accountLocked` / `rateLimited` (nothing
    /// checked) while the address's password budget refuses.
    @discardableResult
    public func require(_ password: String, of user: User, ip: String?, logger: Logger) async throws -> String? {
        let key = keys.password(email: user.email)
        let rule = policy.passwordRule
        let attempt = try await database.transaction(lane: key, logger: logger) { tx in
            try await Self.attempt(AttemptBudget.reserve(tx, key: key, rule: rule, now: clock.now()))
        }
        let stored = try await database.withConnection(logger: logger) { tx in
            try await UserStore().passwordHash(tx, id: user.id, liveOnly: true)
        }
        let withinLimit = password.utf8.count <= InputRules.passwordBytesMax
        let matches = withinLimit ? try await verify(password, stored ?? hasher.dummyHash) && stored != nil : false
        if matches || attempt >= rule.limit {
            try await database.transaction(logger: logger) { tx in
                let now = clock.now()
                if matches {
                    try await AttemptBudget.succeeded(tx, key: key, attempt: attempt, now: now)
                } else {
                    try await AuditLog.record(
                        tx, at: now, actor: user.id, action: "account_locked", subject: user.id, ip: ip, detail: "password check")
                }
            }
        }
        guard matches else { throw AuthError.invalidPassword }
        return stored
    }

    /// The attempt number, or the refusal as the error sign-in answers with.
    static func attempt(_ reservation: AttemptReservation) throws -> Int {
        switch reservation {
        case .reserved(let attempt): return attempt
        case .refused(let seconds, true): throw AuthError.accountLocked(retryAfterSeconds: seconds)
        case .refused(let seconds, false):
            throw AuthError.rateLimited(retryAfterSeconds: seconds, detail: "Too many failed password checks; wait before trying again.")
        }
    }

    func verify(_ secret: String, _ hash: String) async throws -> Bool {
        do { return try await hasher.verify(secret, encoded: hash) } catch PasswordHasherError.overloaded { throw AuthError.overloaded }
    }
}
