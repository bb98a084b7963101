import Foundation
import Storage

/// What a code is for; each address has at most one live code per purpose.
enum CodePurpose: String {
    case verify
    case reset
}

/// The outcome of checking a code. Failures are returned (not thrown) so the transaction that counted
/// the wrong attempt still commits.
enum CodeCheck: Equatable {
    case ok
    case wrong(attemptsRemaining: Int)
    case burned
    case expired
    case missing

    var error: AuthError {
        switch self {
        case .ok, .missing: .invalidOTP(attemptsRemaining: 0)
        case .wrong(let remaining): .invalidOTP(attemptsRemaining: remaining)
        case .burned: .tooManyAttempts
        case .expired: .otpExpired
        }
    }
}

/// Whether another mail may go to an address now.
enum MailBudget: Equatable {
    case allowed
    case cooldown(seconds: Int)
    case exhausted(seconds: Int)
}

extension AuthService {
    /// Takes one send from the address's budget: 60 s between sends and a per-hour maximum, shared by
    /// sign-up, resend and reset mail. Rows exist for any address asked about (no enumeration by 429s).
    func takeMailBudget(_ tx: any SQLExecutor, email: String, now: Date) async throws -> MailBudget {
        let key = secrets.addressKey(email)
        try await tx.query(
            "INSERT INTO mail_budgets (email_hash, window_started_at_ms, sends_in_window, last_sent_at_ms) VALUES (?, ?, 0, 0) ON CONFLICT (email_hash) DO NOTHING",
            [key, now])
        guard let row = try await tx.first("SELECT * FROM mail_budgets WHERE email_hash = ?" + tx.dialect.forUpdate, [key]) else {
            return .allowed
        }
        let lastSent = try row.date("last_sent_at_ms")
        var windowStart = try row.date("window_started_at_ms")
        var sends = Int(try row.int("sends_in_window"))
        let sinceLast = now.timeIntervalSince(lastSent)
        if sinceLast < policy.resendCooldownSeconds {
            return .cooldown(seconds: Int((policy.resendCooldownSeconds - sinceLast).rounded(.up)))
        }
        if now.timeIntervalSince(windowStart) >= 3600 {
            windowStart = now
            sends = 0
        }
        if sends >= policy.mailSendsPerHourMax {
            return .exhausted(seconds: Int(windowStart.addingTimeInterval(3600).timeIntervalSince(now).rounded(.up)))
        }
        try await tx.query(
            "UPDATE mail_budgets SET window_started_at_ms = ?, sends_in_window = ?, last_sent_at_ms = ? WHERE email_hash = ?",
            [windowStart, sends + 1, now, key])
        return .allowed
    }

    /// Replaces the address's code for `purpose` with a new one (stored only as an HMAC) and returns it.
    func issueCode(_ tx: any SQLExecutor, email: String, purpose: CodePurpose, now: Date) async throws -> String {
        let code = SecretHasher.newCode()
        try await tx.query(
            """
            INSERT INTO otp_codes (email, purpose, code_hmac, expires_at_ms, wrong_attempts) VALUES (?, ?, ?, ?, 0)
            ON CONFLICT (email, purpose) DO UPDATE SET code_hmac = excluded.code_hmac, expires_at_ms = excluded.expires_at_ms, wrong_attempts = 0
            """,
            [email, purpose.rawValue, secrets.codeHMAC(code: code, email: email, purpose: purpose.rawValue), now.addingTimeInterval(policy.codeLifetimeSeconds)])
        return code
    }

    /// Checks `code` under a row lock: a right code is consumed (single use); a wrong one counts, and the
    /// fifth wrong try burns the code so that even the right one then fails.
    func consumeCode(_ tx: any SQLExecutor, email: String, purpose: CodePurpose, code: String, now: Date) async throws -> CodeCheck {
        guard
            let row = try await tx.first(
                "SELECT code_hmac, expires_at_ms, wrong_attempts FROM otp_codes WHERE email = ? AND purpose = ?" + tx.dialect.forUpdate,
                [email, purpose.rawValue])
        else { return .missing }
        let attempts = Int(try row.int("wrong_attempts"))
        guard let stored = row.optionalString("code_hmac") else { return attempts >= policy.codeWrongAttemptsMax ? .burned : .missing }
        if try row.date("expires_at_ms") <= now { return .expired }
        let candidate = secrets.codeHMAC(code: code, email: email, purpose: purpose.rawValue)
        if SecretHasher.constantTimeEqual(stored, candidate) {
            try await tx.query("UPDATE otp_codes SET code_hmac = NULL WHERE email = ? AND purpose = ?", [email, purpose.rawValue])
            return .ok
        }
        let newAttempts = attempts + 1
        if newAttempts >= policy.codeWrongAttemptsMax {
            try await tx.query(
                "UPDATE otp_codes SET code_hmac = NULL, wrong_attempts = ? WHERE email = ? AND purpose = ?", [newAttempts, email, purpose.rawValue])
            return .burned
        }
        try await tx.query("UPDATE otp_codes SET wrong_attempts = ? WHERE email = ? AND purpose = ?", [newAttempts, email, purpose.rawValue])
        return .wrong(attemptsRemaining: policy.codeWrongAttemptsMax - newAttempts)
    }
}
