import Foundation
import Storage

/// The `passkeys` and `webauthn_used_challenges` tables: every statement on them, in one place. Rows come back typed.
struct PasskeyStore: Sendable {
    struct Row: Decodable {
        let credentialId: String
        let userId: String
        let userHandle: String
        let publicKey: String
        let signCount: Int64
        let name: String
        let backupEligible: Bool
        let backedUp: Bool
        let createdAt: Date
        let lastUsedAt: Date?
    }

    static let columns =
        "credential_id, user_id, user_handle, public_key, sign_count, name, backup_eligible, backed_up, created_at_ms, last_used_at_ms"

    func insert(
        _ tx: any SQLExecutor, credentialID: String, userID: String, userHandle: String, publicKey: String, algorithm: Int64, signCount: Int64,
        name: String, backupEligible: Bool, backedUp: Bool, now: Date
    ) async throws {
        try await tx.query(
            """
            INSERT INTO passkeys (credential_id, user_id, user_handle, public_key, algorithm, sign_count, name, backup_eligible, backed_up, created_at_ms)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, [credentialID, userID, userHandle, publicKey, algorithm, signCount, name, backupEligible, backedUp, now])
    }

    /// A live account's credential by its id.
    func credential(_ tx: any SQLExecutor, id: String) async throws -> Row? {
        try await tx.first(
            """
            SELECT p.credential_id, p.user_id, p.user_handle, p.public_key, p.sign_count, p.name, p.backup_eligible, p.backed_up,
                p.created_at_ms, p.last_used_at_ms
            FROM passkeys p JOIN users u ON u.id = p.user_id WHERE p.credential_id = ? AND u.deleted_at_ms IS NULL
            """, [id], as: Row.self)
    }

    func list(_ tx: any SQLExecutor, userID: String) async throws -> [Row] {
        try await tx.query("SELECT \(Self.columns) FROM passkeys WHERE user_id = ? ORDER BY created_at_ms, credential_id", [userID], as: Row.self)
    }

    func count(_ tx: any SQLExecutor, userID: String) async throws -> Int {
        Int(try await tx.first("SELECT COUNT(*) AS n FROM passkeys WHERE user_id = ?", [userID])?.int("n") ?? 0)
    }

    /// Moves the counter on and records the use, only if the counter really moved on (or both are 0: an authenticator
    /// without a counter). False: another sign-in with this credential got there first, or the counter went back.
    func advance(_ tx: any SQLExecutor, id: String, from stored: Int64, to counter: Int64, backedUp: Bool, now: Date) async throws -> Bool {
        !(try await tx.query(
            """
            UPDATE passkeys SET sign_count = ?, backed_up = ?, last_used_at_ms = ?
            WHERE credential_id = ? AND sign_count = ? AND (? > sign_count OR (? = 0 AND sign_count = 0)) RETURNING credential_id
            """, [counter, backedUp, now, id, stored, counter, counter])).isEmpty
    }

    func rename(_ tx: any SQLExecutor, id: String, userID: String, name: String) async throws -> Bool {
        !(try await tx.query("UPDATE passkeys SET name = ? WHERE credential_id = ? AND user_id = ? RETURNING credential_id", [name, id, userID]))
            .isEmpty
    }

    func delete(_ tx: any SQLExecutor, id: String, userID: String) async throws -> Bool {
        !(try await tx.query("DELETE FROM passkeys WHERE credential_id = ? AND user_id = ? RETURNING credential_id", [id, userID])).isEmpty
    }

    func deleteAll(_ tx: any SQLExecutor, userID: String) async throws {
        try await tx.query("DELETE FROM passkeys WHERE user_id = ?", [userID])
    }

    /// Marks a challenge used; false when it already was (a replay).
    func useChallenge(_ tx: any SQLExecutor, hash: String, expiresAt: Date) async throws -> Bool {
        !(try await tx.query(
            "INSERT INTO webauthn_used_challenges (challenge_hash, expires_at_ms) VALUES (?, ?) ON CONFLICT (challenge_hash) DO NOTHING RETURNING challenge_hash",
            [hash, expiresAt])).isEmpty
    }
}
