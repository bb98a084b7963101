import Clock
import Events
import Foundation
import Logging
import Storage

extension AuthService {
    /// Changes the account's name or prompt-enhancement setting (owner profile only).
    public func updateMe(_ session: AuthenticatedSession, name: String?, promptEnhancementEnabled: Bool?, logger: Logger) async throws -> User {
        try requireOwnerProfile(session)
        if let name, let problem = InputRules.nameProblem(name) { throw AuthError.validation(problem) }
        return try await sessionTransaction(session, logger: logger) { tx in
            let now = clock.now()
            if let name {
                try await users.setName(tx, id: session.user.id, name.trimmingCharacters(in: .whitespacesAndNewlines), now: now)
            }
            if let promptEnhancementEnabled {
                try await users.setPromptEnhancement(tx, id: session.user.id, promptEnhancementEnabled, now: now)
            }
            return try await loadUser(tx, id: session.user.id)
        }
    }

    /// Erases the account's personal data (email, name, hashes, profiles, devices) and revokes every session (owner
    /// profile only, after the password check). The user id stays, anonymous, so ledger history keeps balancing; the
    /// erasure hook closes what other modules keep (the ledger forfeits the balance in the same transaction).
    public func deleteMe(_ session: AuthenticatedSession, password: String, client: ClientInfo, logger: Logger) async throws {
        try requireOwnerProfile(session)
        // An account without a password (Sign in with Apple only) proves presence by a recent sign-in instead.
        try await requirePresence(session, password: password, client: client, logger: logger)
        let email = session.user.email
        try await sessionTransaction(session, logger: logger) { tx in
            try await erase(tx, userID: session.user.id, email: email, actor: session.user.id, ip: client.ip)
        }
    }

    func hasPassword(userID: String, logger: Logger) async throws -> Bool {
        try await database.withConnection(logger: logger) { tx in
            try await users.passwordHash(tx, id: userID) != nil
        }
    }

    /// Erases one account in the caller's transaction (see ``deleteMe(_:password:client:logger:)``).
    func erase(_ tx: any SQLExecutor, userID id: String, email: String?, actor: String, ip: String?) async throws {
        let now = clock.now()
        try await users.scrub(tx, id: id, now: now)
        try await signOutEverywhere(tx, userID: id, now: now)
        try await sessions.forgetDevices(tx, userID: id)
        for profileID in try await profiles.ids(tx, userID: id) { try await AttemptBudget.clear(tx, key: BudgetKeys.pin(profileID: profileID)) }
        try await profiles.deleteAll(tx, userID: id)
        try await tx.query("DELETE FROM known_devices WHERE user_id = ?", [id])
        try await PasskeyStore().deleteAll(tx, userID: id)
        for table in ["user_identities", "email_changes", "totp_factors", "recovery_codes", "mfa_challenges"] {
            try await tx.query("DELETE FROM \(table) WHERE user_id = ?", [id])
        }
        if let email {
            try await tx.query("DELETE FROM otp_codes WHERE email = ?", [email])
            try await tx.query("DELETE FROM sign_up_requests WHERE email = ?", [email])
        }
        try await erasure.accountErased(userID: id, at: now, executor: tx)
        try await AuditLog.record(tx, at: now, actor: actor, action: "account_deleted", subject: id, ip: ip)
        try await emitUserEvent(tx, "user.deleted", userID: id, email: nil, now: now)
    }

    /// Creates a verified operator account (CLI `admin create`).
    public func createAdmin(email rawEmail: String, password: String, name: String, logger: Logger) async throws -> User {
        guard let email = InputRules.normalizedEmail(rawEmail) else { throw AuthError.validation("Enter a valid email address.") }
        if let problem = InputRules.passwordProblem(password) { throw AuthError.validation(problem) }
        if let problem = InputRules.nameProblem(name) { throw AuthError.validation(problem) }
        let hash = try await hashPassword(password)
        do {
            return try await database.transaction(logger: logger) { tx in
                let now = clock.now()
                // The operator vouches for the address: a pending sign-up somebody started with it does not block it.
                _ = try await releasePendingAccount(tx, email: email, now: now)
                let id = FreshID.uuid()
                try await users.insert(tx, id: id, email: email, name: name, passwordHash: hash, verified: true, role: "admin", now: now)
                _ = try await ensureDefaultProfile(tx, userID: id, name: name, now: now)
                try await AuditLog.record(tx, at: now, actor: "cli", action: "admin_created", subject: id, ip: nil)
                try await emitUserEvent(
                    tx, "user.created", userID: id, email: email, now: now, ["emailVerified": .bool(true), "role": .string("admin")])
                return try await loadUser(tx, id: id)
            }
        } catch StorageError.uniqueViolation {
            throw AuthError.conflict("An account with this email already exists.")
        }
    }

    public func user(id: String, logger: Logger) async throws -> User {
        try await database.withConnection(logger: logger) { tx in try await loadUser(tx, id: id) }
    }
}

/// A user as operators see it.
public struct UserSummary: Sendable, Equatable {
    public let user: User
    public let createdAt: Date
    public let deleted: Bool
}

extension AuthService {
    /// Operator lookup: the user with exactly this address, or the newest users (at most `limit`, ≤ 100).
    public func findUsers(email: String?, limit: Int, logger: Logger) async throws -> [UserSummary] {
        let limit = min(max(limit, 1), 100)
        return try await database.withConnection(logger: logger) { tx in
            if let email {
                guard let normalized = InputRules.normalizedEmail(email) else { throw AuthError.validation("Enter a valid email address.") }
                return try await users.summaries(tx, where: "WHERE email = ?", [normalized])
            }
            return try await users.summaries(tx, where: "ORDER BY created_at_ms DESC, id LIMIT ?", [limit])
        }
    }

    /// Operators' search: users whose email starts with `query` (case-insensitive), in email order, at most `limit`
    /// (≤ 100) after `cursor` (the previous page's `nextCursor`). Keyset paging over an index on both engines, so page
    /// 1,000 costs what page 1 does.
    public func searchUsers(query: String, cursor: String?, limit: Int, logger: Logger) async throws -> (users: [UserSummary], nextCursor: String?) {
        let prefix = query.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
        for (name, value) in [("query", prefix), ("cursor", cursor ?? "-")] {
            guard !value.isEmpty, value.utf8.count <= InputRules.emailBytesMax, !value.unicodeScalars.contains(where: { $0.value == 0 }) else {
                throw AuthError.validation("\(name) must be 1 to \(InputRules.emailBytesMax) bytes of text (the start of an email address).")
            }
        }
        let limit = min(max(limit, 1), 100)
        let rows = try await database.withConnection(logger: logger) { tx in
            let email = tx.dialect.bytewise("email")
            return try await users.summaries(
                tx, where: "WHERE \(email) >= ? AND \(email) < ? AND \(email) > ? ORDER BY \(email) LIMIT ?",
                [prefix, prefix + "\u{10FFFF}", cursor ?? "", limit + 1])
        }
        let page = Array(rows.prefix(limit))
        return (page, rows.count > limit ? page.last?.user.email : nil)
    }

    /// Operator lookup by id (deleted users included, anonymous).
    public func findUser(id: String, logger: Logger) async throws -> UserSummary {
        let found = try await database.withConnection(logger: logger) { tx in try await users.summaries(tx, where: "WHERE id = ?", [id]).first }
        guard let found else { throw AuthError.notFound }
        return found
    }
}
