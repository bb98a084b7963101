import Foundation
import Storage

extension AuthService {
    /// The one rule for removing a sign-in method: the account keeps at least one way in (its password, a linked
    /// provider, a passkey). Locks the account's row first, so two removals at once are decided one after the other and
    /// cannot both take "the other one". `removing` says what is about to go; throws `conflict` when nothing would be left.
    func requireAnotherWayIn(_ tx: any SQLExecutor, userID: String, removing: String) async throws {
        guard try await users.isLive(tx, id: userID, lock: true) else { throw AuthError.notFound }
        let password = try await users.passwordHash(tx, id: userID) != nil ? 1 : 0
        let identities = Int(try await tx.first("SELECT COUNT(*) AS n FROM user_identities WHERE user_id = ?", [userID])?.int("n") ?? 0)
        let passkeys = try await PasskeyStore().count(tx, userID: userID)
        guard password + identities + passkeys > 1 else {
            throw AuthError.conflict(
                "\(removing) is this account's only way in; add another (a password by email reset, Sign in with Apple or a passkey) first.")
        }
    }
}
