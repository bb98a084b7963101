import Clock
import Events
import Foundation
import Logging
import Mail
import Storage

/// Sign-up, email codes, sign-in, sessions, password reset and the account itself (one file per flow:
/// `AuthService+signUp.swift`, `+signIn`, `+passwords`, `+sessions`, `+account`, `+codes`).
///
/// Every multi-row change runs in one transaction; mail is sent after the commit. Every limited attempt reserves its slot
/// in an ``AttemptBudget`` before the slow work (see ``AuthPolicy``); the budgets live in the database, shared by every node.
public struct AuthService: Sendable {
    let database: any Database
    let hasher: PasswordHasher
    let secrets: SecretHasher
    let mailer: any Mailer
    let clock: any TimeSource
    public let policy: AuthPolicy
    let welcome: any WelcomeTokenGrant
    let welcomeTokens: Int
    let erasure: any AccountErasureHook
    /// Where `user.created`, `user.verified` and `user.deleted` are recorded (in the change's transaction).
    let events: any EventSink
    /// The `sessions` table's statements.
    let sessions = SessionStore()
    /// The `users` table's statements.
    let users = UserStore()
    /// The `family_profiles` table's statements.
    let profiles = ProfileStore()
    let keys: BudgetKeys
    /// Password checks behind a session (shared with ``ProfileService``).
    public let passwords: PasswordCheck

    public init(
        database: any Database, hasher: PasswordHasher, secrets: SecretHasher, mailer: any Mailer, clock: any TimeSource,
        policy: AuthPolicy = AuthPolicy(), welcome: any WelcomeTokenGrant = RecordedWelcomeTokenGrant(), welcomeTokens: Int,
        erasure: any AccountErasureHook = NoErasureHook(), events: any EventSink = NoEvents()
    ) {
        self.database = database
        self.hasher = hasher
        self.secrets = secrets
        self.mailer = mailer
        self.clock = clock
        self.policy = policy
        self.welcome = welcome
        self.welcomeTokens = welcomeTokens
        self.erasure = erasure
        self.events = events
        self.keys = BudgetKeys(secrets: secrets)
        self.passwords = PasswordCheck(database: database, hasher: hasher, secrets: secrets, clock: clock, policy: policy)
    }

    // MARK: - Helpers shared by the flows

    /// Records a user event (`user.created`, `user.verified`, `user.deleted`) in the change's transaction.
    func emitUserEvent(
        _ tx: any SQLExecutor, _ type: String, userID: String, email: String?, now: Date, _ extra: [String: EventValue] = [:]
    ) async throws {
        var data = extra
        data["userId"] = .string(userID)
        if let email { data["email"] = .string(email) }
        try await events.emit(tx, DomainEvent(type: type, userID: userID, data: data), at: now)
    }

    func hashPassword(_ password: String) async throws -> String {
        do { return try await hasher.hash(password) } catch PasswordHasherError.overloaded { throw AuthError.overloaded }
    }

    /// Reserves one unauthenticated Argon2 run for the client's IP (its own transaction, before the hash).
    func reserveHashing(ip: String, logger: Logger) async throws {
        let key = keys.hashing(ip: ip)
        let rule = policy.hashingRule
        let reservation = try await database.transaction(lane: key, logger: logger) { tx in
            try await AttemptBudget.reserve(tx, key: key, rule: rule, now: clock.now())
        }
        if case .refused(let seconds, _) = reservation {
            throw AuthError.rateLimited(retryAfterSeconds: seconds, detail: "Too many password operations from this network; try again shortly.")
        }
    }

    func loadUser(_ tx: any SQLExecutor, id: String) async throws -> User {
        guard let user = try await users.user(tx, id: id) else { throw AuthError.notFound }
        return user
    }

    func createSession(_ tx: any SQLExecutor, userID: String, profileID: String?, client: ClientInfo, now: Date) async throws -> IssuedSession {
        let token = SecretHasher.newSessionToken()
        let id = FreshID.uuid()
        let absolute = now.addingTimeInterval(policy.sessionAbsoluteSeconds)
        try await sessions.insert(
            tx, id: id, userID: userID, tokenHash: SecretHasher.tokenHash(token), expiresAt: absolute, client: client, profileID: profileID, now: now)
        return IssuedSession(id: id, token: token, expiresAt: min(absolute, now.addingTimeInterval(policy.sessionIdleSeconds)))
    }

    /// Records the device; true when it was not known before (and the account already had one).
    func rememberDevice(_ tx: any SQLExecutor, userID: String, client: ClientInfo, now: Date) async throws -> Bool {
        let fingerprint = SecretHasher.tokenHash("\(client.userAgent ?? "")|\(client.ipFamily)")
        let hadAny = try await tx.first("SELECT fingerprint FROM known_devices WHERE user_id = ? LIMIT 1", [userID]) != nil
        let inserted = try await tx.query(
            "INSERT INTO known_devices (user_id, fingerprint, first_seen_at_ms) VALUES (?, ?, ?) ON CONFLICT (user_id, fingerprint) DO NOTHING RETURNING user_id",
            [userID, fingerprint, now])
        return hadAny && !inserted.isEmpty
    }

    func ensureDefaultProfile(_ tx: any SQLExecutor, userID: String, name: String, now: Date) async throws -> String {
        if let existing = try await profiles.defaultProfileID(tx, userID: userID) { return existing }
        let id = FreshID.uuid()
        try await profiles.insertDefault(tx, id: id, userID: userID, name: String(name.prefix(30)), now: now)
        return id
    }

    static func checkCodeFormat(_ code: String) throws {
        guard code.utf8.count == 6, code.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else { throw AuthError.validation("The code is 6 digits.") }
    }

    /// Tells the account's owner that one of the family's profiles asks to buy `item` (best effort, after the request
    /// committed; nothing is sent for an erased account or one without an address).
    public func mailPurchaseRequest(userID: String, profileName: String, item: String, tokens: Int64, logger: Logger) async {
        let email = try? await database.withConnection(logger: logger) { tx in try await users.email(tx, id: userID, liveOnly: true) }
        guard let email = email ?? nil else { return }
        await send([Mails.purchaseRequested(to: email, profileName: profileName, item: item, tokens: tokens)], logger: logger)
    }

    func send(_ mails: [MailMessage], logger: Logger) async {
        for mail in mails {
            do { try await mailer.send(mail, logger: logger) } catch {
                // The account change is committed; the user can ask for another code. Never log the body.
                logger.error("mail delivery failed", metadata: ["kind": "\(mail.kind)", "error": .error(error)])
            }
        }
    }
}

/// Called inside the erasure transaction of ``AuthService/deleteMe(_:password:client:logger:)`` so other modules can
/// close what they keep for the user (the ledger forfeits the balance, so an erased user can never be charged).
public protocol AccountErasureHook: Sendable {
    func accountErased(userID: String, at: Date, executor: any SQLExecutor) async throws
}

public struct NoErasureHook: AccountErasureHook {
    public init() {}
    public func accountErased(userID: String, at: Date, executor: any SQLExecutor) async throws {}
}
