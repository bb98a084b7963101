import Foundation
import Storage

/// The one hook through which verification grants the welcome tokens, inside the verification
/// transaction, exactly once per user. The ledger work replaces `RecordedWelcomeTokenGrant` with a
/// ledger transfer into the user's bonus bucket.
public protocol WelcomeTokenGrant: Sendable {
    /// Grants `amountTokens` to `userID` unless already granted; returns what was granted now (0 on a repeat).
    func grantWelcomeTokens(userID: String, amountTokens: Int, at: Date, executor: any SQLExecutor) async throws -> Int
}

/// Records the grant in `welcome_grants` (primary key on the user: a second grant is a no-op).
public struct RecordedWelcomeTokenGrant: WelcomeTokenGrant {
    public init() {}
    public func grantWelcomeTokens(userID: String, amountTokens: Int, at: Date, executor: any SQLExecutor) async throws -> Int {
        let rows = try await executor.query(
            "INSERT INTO welcome_grants (user_id, amount_tokens, granted_at_ms) VALUES (?, ?, ?) ON CONFLICT (user_id) DO NOTHING RETURNING amount_tokens",
            [userID, amountTokens, at])
        return rows.isEmpty ? 0 : amountTokens
    }
}
