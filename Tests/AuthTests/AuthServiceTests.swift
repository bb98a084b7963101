import Clock
import Foundation
import Logging
import Mail
import Storage
import TestSupport
import Testing

@testable import Auth

@Suite("Argon2id and the hashing pool")
struct PasswordHashingTests {
    @Test func hashesArePHCEncodedAndVerify() throws {
        let hash = try Argon2.hash("correct horse battery", parameters: .owasp)
        #expect(hash.hasPrefix("$argon2id$v=19$m=19456,t=2,p=1$"))
        #expect(Argon2.verify("correct horse battery", encoded: hash))
        #expect(!Argon2.verify("correct horse batterY", encoded: hash))
        #expect(Argon2.parameters(of: hash) == .owasp)
        #expect(try Argon2.hash("correct horse battery", parameters: .owasp) != hash, "salted")
        #expect(Argon2.parameters(of: "$2b$12$bcrypt") == nil)
    }

    @Test func aFullQueueRefusesInsteadOfWaitingForever() async throws {
        let hasher = try PasswordHasher(parameters: Argon2Parameters(memoryKiB: 8192, iterations: 3, parallelism: 1), threads: 1, queueLimit: 1)
        let outcomes = await withTaskGroup(of: Bool.self) { group in
            for i in 0..<12 {
                group.addTask { (try? await hasher.hash("password number \(i)")) != nil }
            }
            return await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(outcomes.contains(true))
        #expect(outcomes.contains(false), "beyond threads + queueLimit, hashes are refused (503), not queued without bound")
        #expect(hasher.depth == 0)
    }

    @Test func inputRules() {
        #expect(InputRules.normalizedEmail("  Ada.L+tag@Example.co.UK ") == "ada.l+tag@example.co.uk")
        for bad in [
            "", "a", "a@b", "a@@b.c", "a b@c.de", "a@-b.com", ".a@b.com", "a..b@c.com", "a@b..com", String(repeating: "a", count: 65) + "@b.com",
        ] {
            #expect(InputRules.normalizedEmail(bad) == nil, "\(bad)")
        }
        // One mailbox, one spelling: composed and decomposed are one address; compatibility forms and non-ASCII domains
        // (their xn-- form is the address) are refused.
        #expect(InputRules.normalizedEmail("bo\u{0308}b@example.com") == "b\u{00F6}b@example.com")
        #expect(InputRules.normalizedEmail("B\u{00D6}B@Example.com") == "b\u{00F6}b@example.com")
        for refused in [
            "\u{FF42}ob@example.com", "bob@\u{FF45}xample.com", "bob@ex\u{00E4}mple.com", "bob@exa\u{0308}mple.com", "\u{FB01}x@example.com",
        ] {
            #expect(InputRules.normalizedEmail(refused) == nil, "\(refused)")
        }
        #expect(InputRules.normalizedEmail("bob@xn--exmple-cua.com") == "bob@xn--exmple-cua.com")
        #expect(InputRules.passwordProblem("ünïcødé pässwörd 🔐") == nil)
        #expect(InputRules.passwordProblem("QWERTYUIOP") != nil, "common-password check ignores case")
        #expect(InputRules.passwordProblem(String(repeating: "é", count: 128)) == nil)
        #expect(InputRules.nameProblem("Ada\u{0007}") != nil)
    }

    @Test func codesAndTokensHaveTheirShapes() {
        let codes = (0..<200).map { _ in SecretHasher.newCode() }
        #expect(codes.allSatisfy { $0.count == 6 && $0.allSatisfy(\.isNumber) })
        #expect(Set(codes).count > 190)
        let token = SecretHasher.newSessionToken()
        #expect(token.count == 43 && !token.contains("=") && !token.contains("+") && !token.contains("/"))
        let secrets = SecretHasher(serverSecret: Array("k".utf8))
        #expect(
            secrets.codeHMAC(code: "123456", email: "a@b.c", purpose: "verify") != secrets.codeHMAC(code: "123456", email: "a@b.c", purpose: "reset"))
        #expect(SecretHasher.constantTimeEqual("abc", "abc") && !SecretHasher.constantTimeEqual("abc", "abd"))
    }

    /// Typed codes (any bytes from a request body): a 400 or one of the two shapes, never a trap; a short code is six
    /// ASCII digits, a long one 43 base64url characters (once surrounding spaces are dropped), and nothing else is taken.
    @Test func typedCodesAreOneOfTwoShapes() async throws {
        let corpus = ["123456", "000000", SecretHasher.newSessionToken(), "12345", "1234567", "١٢٣٤٥٦", "12 456", String(repeating: "-", count: 43)]
        var taken = 0
        let count = await Fuzzer(corpus: corpus.map { Array($0.utf8) }, iterationsMin: 1001).run { input in
            let raw = String(decoding: input, as: UTF8.self)
            guard let typed = try? TypedCode(raw) else { return }
            taken += 1
            let trimmed = raw.trimmingCharacters(in: .whitespacesAndNewlines)  // a paste's spaces and line breaks go
            switch typed {
            case .short(let code): #expect(code == trimmed && code.utf8.count == 6 && code.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 })
            case .long(let code): #expect(code == trimmed && code.utf8.count == 43 && code.utf8.allSatisfy(TypedCode.isBase64URL))
            }
        }
        #expect(count > 1000 && taken >= 3)
        #expect(throws: AuthError.self) { try TypedCode("١٢٣٤٥٦") }
    }

    @Test func delaysGrowAfterTheFreeFailures() {
        let policy = AuthPolicy()
        #expect((1...4).map { policy.delaySeconds(afterFailures: $0) } == [0, 0, 0, 0])
        #expect((5...9).map { policy.delaySeconds(afterFailures: $0) } == [1, 2, 4, 8, 16])
    }
}

@Suite("Secret hashing")
struct SecretHashingTests {
    @Test func tokenHashIsHexSHA256OfTheUTF8() {
        // FIPS 180-2, appendix B.1; and a non-ASCII, non-contiguous (bridged-free) string.
        #expect(SecretHasher.tokenHash("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(SecretHasher.tokenHash("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        let token = SecretHasher.newSessionToken()
        #expect(SecretHasher.tokenHash(token) == SecretHasher.tokenHash(String(token.reversed().reversed())))
        #expect(SecretHasher.tokenHash(token).count == 64)
    }
}

@Suite("Auth service on both engines")
struct AuthServiceTests {
    static let cheap = Argon2Parameters(memoryKiB: 64, iterations: 1, parallelism: 1)

    static func service(_ db: any Database, _ parameters: Argon2Parameters = cheap) throws -> AuthService {
        AuthService(
            database: db, hasher: try PasswordHasher(parameters: parameters, threads: 2), secrets: SecretHasher(serverSecret: Array("s".utf8)),
            mailer: LogMailer(), clock: SystemTimeSource(), welcomeTokens: 3)
    }

    static let client = ClientInfo(ip: "127.0.0.1", userAgent: "t")
    static let password = "long enough password"

    /// A migrated database, the service, and an operator account at `email` whose password is ``password``.
    static func withAccount(
        _ engine: Engine, email: String, _ body: @Sendable (any Database, AuthService, User) async throws -> Void
    ) async throws {
        try await TestDatabase.with(engine) { db, _ in
            _ = try await db.migrate(engine.migrations, logger: TestDatabase.logger)
            let auth = try Self.service(db)
            let user = try await auth.createAdmin(email: email, password: password, name: "A", logger: TestDatabase.logger)
            try await body(db, auth, user)
        }
    }

    /// A session signed in with ``password``, as a request that authenticated it sees it.
    static func signedIn(_ auth: AuthService, email: String) async throws -> AuthenticatedSession {
        guard case .session(_, let issued) = try await auth.signIn(email: email, password: password, client: client, logger: TestDatabase.logger)
        else { throw AuthError.unauthorized }
        return try await auth.authenticate(token: issued.token, logger: TestDatabase.logger)
    }

    /// Every write a session asks for checks, in its own transaction under the account's lock, that the session is still
    /// live: a request whose password (or code) was checked before its session was revoked writes nothing, and signing out
    /// everywhere ends a pending address change and authenticator enrolment.
    /// A session made to choose its profile again (a new PIN) while its request was under way writes nothing as the
    /// profile it had: 403 `profile_selection_required`.
    @Test(arguments: TestDatabase.engines)
    func aSessionMadeToChooseAgainWritesNothing(engine: Engine) async throws {
        try await Self.withAccount(engine, email: "chooser@example.com") { db, auth, user in
            let stale = try await Self.signedIn(auth, email: "chooser@example.com")
            let profileID = try #require(stale.selectedProfileID)
            try await db.transaction(logger: TestDatabase.logger) {
                try await SessionStore().requireReselection($0, profileID: profileID, userID: user.id, except: nil)
            }
            await #expect(throws: AuthError.profileSelectionRequired) {
                _ = try await auth.updateMe(stale, name: "Not me", promptEnhancementEnabled: nil, logger: TestDatabase.logger)
            }
            let name = try await db.withConnection(logger: TestDatabase.logger) { try await UserStore().user($0, id: user.id)?.name }
            #expect(name == "A")
        }
    }

    /// A profile is chosen with the PIN it has when the choice is written: a PIN set, changed or removed while the
    /// given one was being checked (Argon2 runs between the two transactions) refuses the choice (`invalid_pin`) and writes
    /// nothing, whether the profile had a PIN before or none; with the PIN unchanged the choice is written.
    @Test(arguments: TestDatabase.engines)
    func aProfileIsChosenWithThePINItHasWhenTheChoiceIsWritten(engine: Engine) async throws {
        try await Self.withAccount(engine, email: "family@example.com") { db, auth, user in
            let log = TestDatabase.logger
            let session = try await Self.signedIn(auth, email: "family@example.com")
            let profiles = ProfileService(
                database: db, hasher: auth.hasher, clock: SystemTimeSource(), policy: AuthPolicy(), passwords: auth.passwords, limits: FiveProfiles())
            let owner = ProfileManager.owner(session, currentPassword: Self.password)
            func input(pin: String?, removePin: Bool = false) -> ProfileInput {
                ProfileInput(name: "Kid", avatar: nil, pin: pin, removePin: removePin, canMakePurchases: false, canUseCustomContentTypes: false)
            }
            let kid = try await profiles.create(userID: user.id, input: input(pin: nil), by: owner, logger: log)
            func checked(_ pin: String?) async throws -> ProfileService.PINAttempt {
                try await profiles.pinGate(userID: user.id, profileID: kid.id, pin: pin, logger: log) { _, _ in kid }.1
            }
            func written(_ passed: ProfileService.PINAttempt) async throws {
                try await db.transaction(logger: log) { try await profiles.pinSucceeded($0, passed) }
            }
            let withoutPIN = try await checked(nil)
            _ = try await profiles.update(userID: user.id, profileID: kid.id, input: input(pin: "1234"), by: owner, logger: log)
            await #expect(throws: AuthError.self, "a PIN set meanwhile") { try await written(withoutPIN) }
            let oldPIN = try await checked("1234")
            _ = try await profiles.update(userID: user.id, profileID: kid.id, input: input(pin: "5678"), by: owner, logger: log)
            await #expect(throws: AuthError.self, "the PIN changed meanwhile") { try await written(oldPIN) }
            let beforeRemoval = try await checked("5678")
            _ = try await profiles.update(userID: user.id, profileID: kid.id, input: input(pin: nil, removePin: true), by: owner, logger: log)
            await #expect(throws: AuthError.self, "the PIN removed meanwhile") { try await written(beforeRemoval) }
            try await written(try await checked(nil))
            // The owner's consent (a purchase approval) the same way: its PIN must still be the one given when the
            // approval is written.
            let ownerID = try #require(session.selectedProfileID)
            func ownerPIN(_ pin: String) -> ProfileInput {
                ProfileInput(name: "Owner", avatar: nil, pin: pin, removePin: false, canMakePurchases: true, canUseCustomContentTypes: true)
            }
            _ = try await profiles.update(userID: user.id, profileID: ownerID, input: ownerPIN("1111"), by: owner, logger: log)
            let consent = try await profiles.ownerConsent(session, pin: "1111", logger: log)
            _ = try await profiles.update(userID: user.id, profileID: ownerID, input: ownerPIN("2222"), by: owner, logger: log)
            await #expect(throws: AuthError.self, "the owner's PIN changed after the consent") {
                try await db.transaction(logger: log) { try await consent($0) }
            }
            let fresh = try await profiles.ownerConsent(session, pin: "2222", logger: log)
            try await db.transaction(logger: log) { try await fresh($0) }
            let chosen = try await profiles.select(session, profileID: kid.id, pin: nil, logger: log)
            #expect(chosen.id == kid.id)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func aRevokedSessionsRequestsInFlightWriteNothing(engine: Engine) async throws {
        try await Self.withAccount(engine, email: "owner@example.com") { db, auth, user in
            let log = TestDatabase.logger
            let stale = try await Self.signedIn(auth, email: "owner@example.com")
            try await auth.requestEmailChange(stale, newEmail: "mine@example.com", currentPassword: Self.password, client: Self.client, logger: log)
            _ = try await auth.setupTOTP(stale, currentPassword: Self.password, issuer: "T", client: Self.client, logger: log)
            func pending() async throws -> [String] {
                try await db.withConnection(logger: log) { tx in
                    try await tx.query("SELECT new_email AS v FROM email_changes UNION ALL SELECT 'totp' AS v FROM totp_factors").map {
                        try $0.string("v")
                    }
                }
            }
            #expect(try await pending().sorted() == ["mine@example.com", "totp"])
            // The requests below authenticated `stale`; then it was revoked while their passwords were being checked.
            try await auth.revokeSession(id: stale.sessionID, of: stale, client: Self.client, logger: log)
            let profiles = ProfileService(
                database: db, hasher: auth.hasher, clock: SystemTimeSource(), policy: AuthPolicy(), passwords: auth.passwords, limits: FiveProfiles())
            let owner = ProfileManager.owner(stale, currentPassword: Self.password)
            let kid = ProfileInput(name: "Kid", avatar: nil, pin: "1234", removePin: false, canMakePurchases: true, canUseCustomContentTypes: true)
            let writes: [(String, @Sendable () async throws -> Void)] = [
                (
                    "email change",
                    {
                        try await auth.requestEmailChange(
                            stale, newEmail: "thief@example.com", currentPassword: Self.password, client: Self.client, logger: log)
                    }
                ),
                ("email confirm", { _ = try await auth.confirmEmailChange(stale, code: "123456", client: Self.client, logger: log) }),
                (
                    "TOTP setup",
                    { _ = try await auth.setupTOTP(stale, currentPassword: Self.password, issuer: "T", client: Self.client, logger: log) }
                ),
                ("TOTP enable", { _ = try await auth.enableTOTP(stale, code: "123456", client: Self.client, logger: log) }),
                ("erasure", { try await auth.deleteMe(stale, password: Self.password, client: Self.client, logger: log) }),
                (
                    "Apple unlink",
                    { try await auth.unlinkSignInMethod(stale, provider: "apple", currentPassword: Self.password, client: Self.client, logger: log) }
                ),
                ("profile create", { _ = try await profiles.create(userID: user.id, input: kid, by: owner, logger: log) }),
                (
                    "operator key",
                    {
                        _ = try await APIKeyService(database: db, clock: SystemTimeSource()).create(
                            name: "k", scopes: ["admin"], createdBy: .session(stale), logger: log)
                    }
                ),
            ]
            for (name, write) in writes {
                await #expect(throws: AuthError.unauthorized, "\(name)") { try await write() }
            }
            #expect(try await pending().sorted() == ["mine@example.com", "totp"])
            let account = try await db.withConnection(logger: log) { tx in
                try await tx.first(
                    "SELECT email, deleted_at_ms, (SELECT COUNT(*) FROM family_profiles) + (SELECT COUNT(*) FROM api_keys) AS n FROM users WHERE id = ?",
                    [user.id])
            }
            #expect(try account?.string("email") == "owner@example.com" && account?.optionalInt("deleted_at_ms") == nil && account?.int("n") == 1)
            try await db.transaction(logger: log) { try await auth.signOutEverywhere($0, userID: user.id, now: Date()) }
            #expect(try await pending().isEmpty)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func adminCreationIsVerifiedAuditedAndUnique(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            _ = try await db.migrate(engine.migrations, logger: TestDatabase.logger)
            let auth = try Self.service(db)
            let admin = try await auth.createAdmin(
                email: "Root@Example.com", password: "long enough password", name: "Root", logger: TestDatabase.logger)
            #expect(admin.role == "admin" && admin.emailVerified && admin.email == "root@example.com")
            let profiles = try await db.withConnection(logger: TestDatabase.logger) { tx in
                try await tx.query("SELECT is_default FROM family_profiles WHERE user_id = ?", [admin.id])
            }
            #expect(try profiles.map { try $0.bool("is_default") } == [true])
            await #expect(throws: AuthError.conflict("An account with this email already exists.")) {
                _ = try await auth.createAdmin(email: "root@example.com", password: "long enough password", name: "Root", logger: TestDatabase.logger)
            }
            let audit = try await db.withConnection(logger: TestDatabase.logger) {
                try await $0.query("SELECT actor, action, subject FROM audit_log")
            }
            #expect(audit.count == 1)
            #expect(try audit[0].string("action") == "admin_created" && audit[0].optionalString("subject") == admin.id)
        }
    }

    /// An operator vouching for an address (`account-service admin create`) releases a pending sign-up there: the
    /// admin account holds the address and none of the pending requests' passwords open it.
    @Test(arguments: TestDatabase.engines)
    func adminCreationReleasesAPendingSignUp(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            _ = try await db.migrate(engine.migrations, logger: TestDatabase.logger)
            let auth = try Self.service(db)
            let client = ClientInfo(ip: "127.0.0.1", userAgent: "t")
            try await auth.signUp(email: "ops@example.com", password: "attackers passphrase", name: "M", client: client, logger: TestDatabase.logger)
            let admin = try await auth.createAdmin(
                email: "ops@example.com", password: "long enough password", name: "Ops", logger: TestDatabase.logger)
            #expect(admin.emailVerified && admin.email == "ops@example.com")
            let rows = try await db.withConnection(logger: TestDatabase.logger) { tx in
                try await tx.query("SELECT id, email, deleted_at_ms FROM users ORDER BY created_at_ms, id")
            }
            #expect(rows.count == 2)
            #expect(try rows.filter { $0.optionalString("email") == "ops@example.com" }.map { try $0.string("id") } == [admin.id])
            let requests = try await db.withConnection(logger: TestDatabase.logger) { try await $0.query("SELECT id FROM sign_up_requests") }
            #expect(requests.isEmpty)
            await #expect(throws: AuthError.self) {
                _ = try await auth.signIn(email: "ops@example.com", password: "attackers passphrase", client: client, logger: TestDatabase.logger)
            }
        }
    }

    /// A sign-in whose password was checked against a hash that a reset or change replaced before its session was opened
    /// opens nothing (the transaction checks the hash again under the account's lock), and a full sign-in then checks the
    /// password against the hash in force.
    @Test(arguments: TestDatabase.engines)
    func aSignInCheckedBeforeAPasswordChangeOpensNoSession(engine: Engine) async throws {
        try await Self.withAccount(engine, email: "race@example.com") { db, auth, user in
            let client = Self.client
            let candidate = try #require(
                try await db.withConnection(logger: TestDatabase.logger) { try await UserStore().signInCandidate($0, email: "race@example.com") })
            let checked = try #require(candidate.passwordHash)
            // The password was checked against `checked`; then a reset commits a new hash.
            let replaced = try await auth.hasher.hash("another long password")
            try await db.transaction(logger: TestDatabase.logger) { tx in
                try await UserStore().setPasswordHash(tx, id: user.id, replaced, now: Date())
                try await auth.signOutEverywhere(tx, userID: user.id, now: Date())
            }
            let attempt = try await auth.reserveSignIn(email: "race@example.com", ip: client.ip, logger: TestDatabase.logger)
            let opened = try await auth.openSession(
                candidate, checkedHash: checked, rehash: nil, attempt: attempt, client: client, logger: TestDatabase.logger)
            #expect(opened == nil)
            let sessions = try await db.withConnection(logger: TestDatabase.logger) { try await $0.query("SELECT id FROM sessions") }
            #expect(sessions.isEmpty)
            await #expect(throws: AuthError.invalidCredentials) {
                _ = try await auth.signIn(email: "race@example.com", password: "long enough password", client: client, logger: TestDatabase.logger)
            }
            let signedIn = try await auth.signIn(
                email: "race@example.com", password: "another long password", client: client, logger: TestDatabase.logger)
            guard case .session = signedIn else { Issue.record("expected a session, got \(signedIn)"); return }
            // The console's sign-in: the same stale hash opens nothing there either.
            let consoleAttempt = try await auth.reserveSignIn(email: "race@example.com", ip: client.ip, logger: TestDatabase.logger)
            let console = try await auth.openConsoleSession(
                userID: user.id, checkedHash: checked, attempt: consoleAttempt, code: nil, requireSecondFactor: false, client: client,
                logger: TestDatabase.logger)
            #expect(console == nil)
            // A hash that changed between the check and the lock (a parallel sign-in rehashed it) is checked once more.
            var rounds = 0
            let rehashed = try await auth.hasher.hash("another long password")
            let matched = try await auth.checkPassword(
                "another long password", email: "race@example.com", attempt: consoleAttempt, client: client, logger: TestDatabase.logger
            ) { _, hash -> String? in
                rounds += 1
                guard rounds > 1 else {
                    try await db.transaction(logger: TestDatabase.logger) {
                        try await UserStore().setPasswordHash($0, id: user.id, rehashed, now: Date())
                    }
                    return nil
                }
                return hash
            }
            #expect(rounds == 2 && matched == rehashed)
            let (admin, _) = try await auth.consoleSignIn(
                ConsoleSignIn(email: "race@example.com", password: "another long password", code: nil), requireSecondFactor: false,
                client: client, logger: TestDatabase.logger)
            #expect(admin.id == user.id)
        }
    }

    /// A password change whose current password was checked before a reset (or a revocation) committed writes nothing:
    /// the owner's reset stands (a reviewer showed a stolen session looping change-password undoing it).
    @Test(arguments: TestDatabase.engines)
    func aPasswordChangeCheckedBeforeAResetWritesNothing(engine: Engine) async throws {
        try await Self.withAccount(engine, email: "change@example.com") { db, auth, user in
            let client = Self.client
            func current() async throws -> String? {
                try await db.withConnection(logger: TestDatabase.logger) { try await UserStore().passwordHash($0, id: user.id) }
            }
            let changer = try await Self.signedIn(auth, email: "change@example.com")
            let checkedByChanger = try await current()
            let ownersHash = try await auth.hasher.hash("the owner's new password")
            try await db.transaction(logger: TestDatabase.logger) { tx in
                try await UserStore().setPasswordHash(tx, id: user.id, ownersHash, now: Date())
                try await auth.signOutEverywhere(tx, userID: user.id, now: Date())
            }
            let attackers = try await auth.hasher.hash("the attacker's password")
            await #expect(throws: AuthError.invalidPassword) {
                try await auth.commitPasswordChange(
                    changer, checkedHash: checkedByChanger, newHash: attackers, client: client, logger: TestDatabase.logger)
            }
            await #expect(throws: AuthError.unauthorized) {
                try await auth.commitPasswordChange(changer, checkedHash: ownersHash, newHash: attackers, client: client, logger: TestDatabase.logger)
            }
            #expect(try await current() == ownersHash)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func aHashWithOldParametersIsReplacedAtSignIn(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            _ = try await db.migrate(engine.migrations, logger: TestDatabase.logger)
            let old = try Self.service(db, Self.cheap)
            let admin = try await old.createAdmin(email: "r@example.com", password: "long enough password", name: "R", logger: TestDatabase.logger)
            let newer = Argon2Parameters(memoryKiB: 128, iterations: 2, parallelism: 1)
            let upgraded = try Self.service(db, newer)
            _ = try await upgraded.signIn(
                email: "r@example.com", password: "long enough password", client: ClientInfo(ip: "127.0.0.1", userAgent: "t"),
                logger: TestDatabase.logger)
            let hash = try await db.withConnection(logger: TestDatabase.logger) {
                try await $0.first("SELECT password_hash FROM users WHERE id = ?", [admin.id])!.string("password_hash")
            }
            #expect(Argon2.parameters(of: hash) == newer)
            #expect(Argon2.verify("long enough password", encoded: hash))
        }
    }
}

@Suite("Touches under way")
struct TouchesUnderWayTests {
    @Test("a row's touch is written by one caller at a time; another row's is not held up; a failed write fails no request and frees the row")
    func oneWriterPerRow() async {
        struct Failed: Error {}
        let touches = TouchesUnderWay(kind: "session")
        let logger = Logger(label: "test")
        var ran: [String] = []
        await touches.once("session-a", logger: logger) {
            ran.append("a")
            await touches.once("session-a", logger: logger) { ran.append("a again, while a is written") }
            await touches.once("session-b", logger: logger) { ran.append("b") }
        }
        await touches.once("session-a", logger: logger) {
            ran.append("a, failing")
            throw Failed()
        }
        await touches.once("session-a", logger: logger) { ran.append("a after") }
        #expect(ran == ["a", "b", "a, failing", "a after"])
    }
}

/// A plan that allows five family profiles.
struct FiveProfiles: ProfilePlanLimits {
    func maxFamilyProfiles(userID: String, now: Date, _ tx: any SQLExecutor) async throws -> Int { 5 }
}
