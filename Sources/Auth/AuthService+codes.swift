import Clock
import Foundation
import Logging
import Storage

/// What a code is for; each address has at most one code per purpose.
enum CodePurpose: String, Sendable {
    case verify
    case reset
    /// An email change (its code lives in `email_changes`; the budget is keyed by the user).
    case emailChange = "email_change"
}

/// The outcome of checking a code. Failures are returned (not thrown) so the transaction that recorded them still commits.
/// Only someone who holds the code can tell `used` or `expired` from `wrong`: the answers for a wrong code are the same
/// whether the address has an account, a pending sign-up or nothing at all.
enum CodeCheck: Equatable {
    case ok
    case wrong(attemptsRemaining: Int)
    case burned
    case expired
    case used

    var error: AuthError {
        switch self {
        case .ok: .invalidOTP(attemptsRemaining: 0)
        case .wrong(let remaining): .invalidOTP(attemptsRemaining: remaining)
        case .burned: .tooManyAttempts(retryAfterSeconds: 60)
        case .expired: .otpExpired
        case .used: .otpAlreadyUsed
        }
    }
}

/// Whether another mail of a purpose may go to an address now.
enum MailBudget: Equatable {
    case allowed
    case throttled(retryAfterSeconds: Int)
}

extension AuthService {
    /// Takes one send from the address's budget for `purpose` (a cooldown between sends and an hourly maximum). Budgets
    /// are kept for any address asked about, so a throttled answer does not reveal which addresses have accounts.
    func takeMailBudget(_ tx: any SQLExecutor, _ purpose: MailPurpose, email: String, now: Date) async throws -> MailBudget {
        switch try await AttemptBudget.reserve(tx, key: keys.mail(purpose, email: email), rule: policy.mailRule, now: now) {
        case .reserved: .allowed
        case .refused(let seconds, _): .throttled(retryAfterSeconds: seconds)
        }
    }

    /// Replaces the address's codes for `purpose` with new ones (stored only as HMACs) and returns them. Callers give
    /// the address fresh code attempts (``resetCodeAttempts(_:_:email:)``) for every address, account or not.
    func issueCode(_ tx: any SQLExecutor, email: String, purpose: CodePurpose, now: Date) async throws -> MailedCode {
        let code = MailedCode.new()
        let hmacs = code.hmacs(secrets, email: email, purpose: purpose)
        try await tx.query(
            """
            INSERT INTO otp_codes (email, purpose, code_hmac, link_hmac, expires_at_ms, consumed_at_ms) VALUES (?, ?, ?, ?, ?, NULL)
            ON CONFLICT (email, purpose) DO UPDATE SET code_hmac = excluded.code_hmac, link_hmac = excluded.link_hmac,
                expires_at_ms = excluded.expires_at_ms, consumed_at_ms = NULL
            """,
            [email, purpose.rawValue, hmacs.short, hmacs.long, now.addingTimeInterval(policy.codeLifetimeSeconds)])
        return code
    }

    /// The first steps of a code mail, the same for every address: take the address's mail budget for the code's
    /// purpose (throttled → 429 `rate_limited`, nothing written). Returns the address's live account (`id`,
    /// `email_verified`), or nil. Fresh code attempts (``resetCodeAttempts(_:_:email:)``) come only with a fresh code.
    func startCodeMail(_ tx: any SQLExecutor, _ purpose: CodePurpose, email: String, now: Date) async throws -> UserStore.Holder? {
        if case .throttled(let seconds) = try await takeMailBudget(tx, purpose == .verify ? .verification : .reset, email: email, now: now) {
            throw AuthError.rateLimited(retryAfterSeconds: seconds, detail: "Too many codes requested for this address; wait before asking again.")
        }
        return try await users.holder(tx, email: email)
    }

    func resetCodeAttempts(_ tx: any SQLExecutor, _ purpose: CodePurpose, email: String) async throws {
        try await AttemptBudget.clear(tx, key: keys.code(purpose, email: email))
    }

    /// Reserves one check of a typed code, before it is checked: a short code's from the address's budget
    /// (``reserveCodeAttempt(_:email:logger:)``). A long one has no budget (attempt 0, which never burns anything): 256
    /// bits cannot be guessed, a check is one indexed read, as a wrong short code for an unknown address is, and any
    /// budget would be one that someone sharing the owner's network could spend (both helpers showed it with a
    /// per-network one).
    func reserveCheck(_ typed: TypedCode, _ purpose: CodePurpose, email: String, logger: Logger) async throws -> Int {
        typed.isLong ? 0 : try await reserveCodeAttempt(purpose, email: email, logger: logger)
    }

    /// Reserves one code check for the address (its own transaction, before the check): the sixth check of a code's life
    /// is refused without looking at it, for every address alike.
    func reserveCodeAttempt(_ purpose: CodePurpose, email: String, logger: Logger) async throws -> Int {
        let key = keys.code(purpose, email: email)
        let rule = policy.codeRule
        let reservation = try await database.transaction(lane: key, logger: logger) { tx in
            try await AttemptBudget.reserve(tx, key: key, rule: rule, now: clock.now())
        }
        switch reservation {
        case .reserved(let attempt): return attempt
        case .refused(let seconds, _): throw AuthError.tooManyAttempts(retryAfterSeconds: seconds)
        }
    }

    /// Checks `code` (attempt `attempt` of the address's code budget) under a row lock. With `consume` a right code is used
    /// up (single use, the long one with the short) and the budget starts again; a wrong short one at the last attempt
    /// burns the short code (the long one keeps working).
    func checkCode(
        _ tx: any SQLExecutor, email: String, purpose: CodePurpose, code: TypedCode, attempt: Int, consume: Bool, now: Date
    ) async throws -> CodeCheck {
        let row = try await tx.first(
            "SELECT \(code.column) AS stored, expires_at_ms, consumed_at_ms FROM otp_codes WHERE email = ? AND purpose = ?" + tx.dialect.forUpdate,
            [email, purpose.rawValue])
        let candidate = code.hmac(secrets, email: email, purpose: purpose)
        guard let row, let stored = row.optionalString("stored"), SecretHasher.constantTimeEqual(stored, candidate) else {
            guard attempt >= policy.codeWrongAttemptsMax else { return .wrong(attemptsRemaining: policy.codeWrongAttemptsMax - attempt) }
            try await tx.query(
                "UPDATE otp_codes SET code_hmac = NULL WHERE email = ? AND purpose = ? AND consumed_at_ms IS NULL", [email, purpose.rawValue])
            return .burned
        }
        if row.optionalInt("consumed_at_ms") != nil { return .used }
        if try row.date("expires_at_ms") <= now { return .expired }
        if consume { try await consumeCode(tx, email: email, purpose: purpose, now: now) }
        return .ok
    }

    /// Uses up the address's live code for `purpose` (single use) and gives the address fresh code attempts.
    func consumeCode(_ tx: any SQLExecutor, email: String, purpose: CodePurpose, now: Date) async throws {
        // The long code's hash goes too: a build from before long codes re-issues the six digits alone (clearing
        // `consumed_at_ms`), and must not bring a used long code back during a rolling deploy.
        try await tx.query(
            "UPDATE otp_codes SET consumed_at_ms = ?, link_hmac = NULL WHERE email = ? AND purpose = ?", [now, email, purpose.rawValue])
        try await resetCodeAttempts(tx, purpose, email: email)
    }
}
