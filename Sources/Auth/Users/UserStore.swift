import Foundation
import Storage

/// The `users` table: every statement that writes it and the reads of Auth's flows, in one place (`SessionStore` joins
/// it to check a session; operators' views read through ``summaries(_:where:_:)``). Rows come back typed.
struct UserStore: Sendable {
    /// Who holds an address: the account and whether it is verified (a pending sign-up is not).
    struct Holder: Decodable {
        let id: String
        let name: String
        let emailVerified: Bool
    }

    /// A sign-in's candidate: a pending account's password is its newest live sign-up request's.
    struct SignInCandidate: Decodable {
        let id: String
        let emailVerified: Bool
        let passwordHash: String?
    }

    /// The live account holding `email` (`lock`: its row locked for the transaction, so two flows on one address queue).
    func holder(_ tx: any SQLExecutor, email: String, lock: Bool = false) async throws -> Holder? {
        try await tx.first(
            "SELECT id, name, email_verified FROM users WHERE email = ? AND deleted_at_ms IS NULL" + (lock ? tx.dialect.forUpdate : ""), [email],
            as: Holder.self)
    }

    func signInCandidate(_ tx: any SQLExecutor, email: String) async throws -> SignInCandidate? {
        try await tx.first(
            """
            SELECT id, email_verified, COALESCE(password_hash, (SELECT r.password_hash FROM sign_up_requests r WHERE r.email = users.email
                AND r.consumed_at_ms IS NULL ORDER BY r.created_at_ms DESC LIMIT 1)) AS password_hash
            FROM users WHERE email = ? AND deleted_at_ms IS NULL
            """, [email], as: SignInCandidate.self)
    }

    /// Whether a live account has this id (`lock`: its row locked for the transaction, as every locker of it does:
    /// `FOR NO KEY UPDATE`, which rows referencing it do not wait for; `share`: share-locked, so an erasure, which
    /// updates the row, waits for this transaction, and this one, if the erasure came first, sees the account erased).
    func isLive(_ tx: any SQLExecutor, id: String, lock: Bool = false, share: Bool = false) async throws -> Bool {
        let mode = lock ? tx.dialect.forNoKeyUpdate : share ? tx.dialect.forShare : ""
        return try await tx.first("SELECT id FROM users WHERE id = ? AND deleted_at_ms IS NULL" + mode, [id]) != nil
    }

    func user(_ tx: any SQLExecutor, id: String) async throws -> User? {
        try await tx.first("SELECT \(User.columns) FROM users WHERE id = ?", [id]).map(User.init(row:))
    }

    /// The account's address (`liveOnly`: nil for an erased account, whose address is gone anyway).
    func email(_ tx: any SQLExecutor, id: String, liveOnly: Bool = false) async throws -> String? {
        try await tx.first("SELECT email FROM users WHERE id = ?" + (liveOnly ? " AND deleted_at_ms IS NULL" : ""), [id])?.optionalString("email")
    }

    /// The account's password hash (nil: it has none, as an Apple-only or pending account; `liveOnly`: or it is erased;
    /// `lock`: the row locked against updates for the transaction, as ``AuthService/signOutEverywhere(_:userID:except:now:)``
    /// locks it; a session insert's key-share lock on the row is not blocked, so the lock forms no cycle with a second
    /// factor's sign-in).
    func passwordHash(_ tx: any SQLExecutor, id: String, liveOnly: Bool = false, lock: Bool = false) async throws -> String? {
        try await tx.first(
            "SELECT password_hash FROM users WHERE id = ?" + (liveOnly ? " AND deleted_at_ms IS NULL" : "") + (lock ? tx.dialect.forNoKeyUpdate : ""),
            [id]
        )?
        .optionalString("password_hash")
    }

    func insert(
        _ tx: any SQLExecutor, id: String, email: String, name: String, passwordHash: String?, verified: Bool, role: String, now: Date
    ) async throws {
        try await tx.query(
            """
            INSERT INTO users (id, email, name, password_hash, email_verified, role, prompt_enhancement_enabled, created_at_ms, updated_at_ms)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, [id, email, name, passwordHash, verified, role, true, now, now])
    }

    /// The address is proved: the account is verified with this name and password (nil: none, as for Apple).
    func verify(_ tx: any SQLExecutor, id: String, name: String, passwordHash: String?, now: Date) async throws {
        try await tx.query(
            "UPDATE users SET email_verified = ?, name = ?, password_hash = ?, updated_at_ms = ? WHERE id = ?", [true, name, passwordHash, now, id])
    }

    func setPasswordHash(_ tx: any SQLExecutor, id: String, _ hash: String, now: Date) async throws {
        try await tx.query("UPDATE users SET password_hash = ?, updated_at_ms = ? WHERE id = ?", [hash, now, id])
    }

    /// A new, proved address.
    func setEmail(_ tx: any SQLExecutor, id: String, _ email: String, now: Date) async throws {
        try await tx.query("UPDATE users SET email = ?, email_verified = ?, updated_at_ms = ? WHERE id = ?", [email, true, now, id])
    }

    func setName(_ tx: any SQLExecutor, id: String, _ name: String, now: Date) async throws {
        try await tx.query("UPDATE users SET name = ?, updated_at_ms = ? WHERE id = ?", [name, now, id])
    }

    func setPromptEnhancement(_ tx: any SQLExecutor, id: String, _ enabled: Bool, now: Date) async throws {
        try await tx.query("UPDATE users SET prompt_enhancement_enabled = ?, updated_at_ms = ? WHERE id = ?", [enabled, now, id])
    }

    /// Erasure of the row: no address, name or password is left; the id stays for the books.
    func scrub(_ tx: any SQLExecutor, id: String, now: Date) async throws {
        try await tx.query(
            "UPDATE users SET email = NULL, name = 'Deleted user', password_hash = NULL, deleted_at_ms = ?, updated_at_ms = ? WHERE id = ?",
            [now, now, id])
    }

    /// Operators' views: users (erased ones too) matching `condition`, with when they were created and whether erased.
    func summaries(_ tx: any SQLExecutor, where condition: String, _ binds: [any SQLBindable]) async throws -> [UserSummary] {
        try await tx.query("SELECT \(User.columns), created_at_ms, deleted_at_ms FROM users \(condition)", binds).map {
            UserSummary(user: try User(row: $0), createdAt: try $0.date("created_at_ms"), deleted: $0.optionalInt("deleted_at_ms") != nil)
        }
    }
}
