import Clock
import Foundation
import Logging
import Storage

/// What an operator sees of an account besides its summary: how it signs in.
public struct AccountFacts: Sendable, Equatable {
    /// Two-factor codes are on.
    public let secondFactor: Bool
    /// Linked sign-in providers (`apple`), and `passkey` when the account has one.
    public let identities: [String]
    /// A password is set (accounts from Sign in with Apple may have none).
    public let hasPassword: Bool
}

extension AuthService {
    /// How the account signs in, for operators.
    public func accountFacts(userID: String, logger: Logger) async throws -> AccountFacts {
        try await database.withConnection(logger: logger) { tx in
            let factor = try await tx.first("SELECT enabled_at_ms FROM totp_factors WHERE user_id = ?", [userID])
            let identities = try await tx.query("SELECT provider FROM user_identities WHERE user_id = ? ORDER BY provider", [userID])
            return AccountFacts(
                secondFactor: factor?.optionalInt("enabled_at_ms") != nil,
                identities: try identities.map { try $0.string("provider") }
                    + (try await PasskeyStore().count(tx, userID: userID) > 0 ? ["passkey"] : []),
                hasPassword: try await users.passwordHash(tx, id: userID) != nil)
        }
    }

    /// An operator erases an account, as its owner can (personal data scrubbed, sessions revoked, tokens forfeited, the
    /// `user.deleted` event), after typing the account's email address (or its id, for an account without one) as
    /// confirmation. An operator cannot erase their own account here; an erased account is 404.
    public func eraseByOperator(userID: String, confirmation: String, actor: String, ip: String?, logger: Logger) async throws {
        guard actor != "user:" + userID else { throw AuthError.forbidden("Operators erase their own account from the app, not as an operator.") }
        let summary = try await findUser(id: userID, logger: logger)
        if summary.deleted { throw AuthError.notFound }
        let expected = summary.user.email.isEmpty ? summary.user.id : summary.user.email
        guard confirmation.trimmingCharacters(in: .whitespaces).lowercased() == expected.lowercased() else {
            throw AuthError.validation("Type the account's email address (\(expected)) to confirm the erasure.")
        }
        let erased: Bool = try await database.transaction(logger: logger) { tx in
            // Locked and checked again: two operators erasing at once erase (and announce) it once.
            let live = try await tx.first("SELECT deleted_at_ms FROM users WHERE id = ?" + tx.dialect.forUpdate, [userID])
            guard let live, live.optionalInt("deleted_at_ms") == nil else { return false }
            try await erase(tx, userID: userID, email: summary.user.email.isEmpty ? nil : summary.user.email, actor: actor, ip: ip)
            return true
        }
        guard erased else { throw AuthError.notFound }
    }
}
