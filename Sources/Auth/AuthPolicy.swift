import Foundation

/// The limits of the auth flows, in one place (DESIGN.md security parameters). Each limited attempt goes through an
/// ``AttemptBudget`` with one of the rules below; docs/security.md lists them with their keys.
public struct AuthPolicy: Sendable {
    public var codeLifetimeSeconds: Double = 10 * 60
    /// Wrong codes per address and purpose before the code stops working (`too_many_attempts`); a new code starts again.
    public var codeWrongAttemptsMax = 5
    /// Seconds between two mails of one purpose to one address (`MAIL_COOLDOWN_SECONDS`).
    public var mailCooldownSeconds: Double = 60
    /// Mails of one purpose to one address per hour (`MAIL_SENDS_PER_HOUR`).
    public var mailSendsPerHourMax = 5
    /// A sign-up request (its password, name and code) lives this long; resend-otp renews its code meanwhile when it is
    /// the address's only one.
    public var pendingSignUpSeconds: Double = 24 * 3600
    /// Live sign-up requests kept per address (the oldest make room).
    public var pendingSignUpRequestsMax = 10
    public var sessionAbsoluteSeconds: Double = 30 * 24 * 3600
    public var sessionIdleSeconds: Double = 7 * 24 * 3600
    /// An expired session is forgotten this much later (a week in which support still sees it).
    public var sessionRetentionSeconds: Double = 7 * 24 * 3600
    /// Audit rows are kept this long: 400 days, a year and the review after it.
    public var auditRetentionSeconds: Double = 400 * 24 * 3600
    /// `last_used_at` is written at most this often per session (not on every request).
    public var sessionTouchIntervalSeconds: Double = 60
    /// Consecutive failed password checks for one address before the growing delays start.
    public var signInFreeFailures = 4
    /// Consecutive failed password checks for one address that lock it.
    public var signInFailuresToLock = 10
    /// Failed sign-ins from one client IP that lock the IP (higher: many users share NAT addresses).
    public var ipFailuresToLock = 50
    public var lockSeconds: Double = 15 * 60
    /// Argon2 runs per client IP per minute for unauthenticated requests (sign-up, sign-in, reset) (`IP_HASHES_PER_MINUTE`).
    public var ipHashesPerMinute = 30
    /// Wrong PINs in a row that lock a profile, and for how long.
    public var pinAttemptsMax = 5
    public var pinLockSeconds: Double = 15 * 60
    /// A session whose sign-in or password confirmation is younger than this is a *recent authentication*: it may change
    /// PINs without `currentPassword`, an operator's may make lasting access (API keys, webhook endpoints), and an account
    /// without a password proves presence by it (``isRecent(authenticatedAt:now:)``).
    public var recentAuthenticationSeconds: Double = 10 * 60

    /// Whether a session authenticated at `authenticatedAt` counts as a recent authentication at `now`.
    public func isRecent(authenticatedAt: Date, now: Date) -> Bool { now.timeIntervalSince(authenticatedAt) <= recentAuthenticationSeconds }

    public init() {}

    /// Seconds an address must wait after `failures` consecutive failures: 0 up to `signInFreeFailures`,
    /// then 1, 2, 4, 8, 16 s … until the lock.
    public func delaySeconds(afterFailures failures: Int) -> Double {
        guard failures > signInFreeFailures else { return 0 }
        return Double(1 << min(failures - signInFreeFailures - 1, 10))
    }

    /// Password checks for one address (sign-in and every check behind a session): growing delays, then a lock.
    public var passwordRule: AttemptRule {
        var delays: [Int: Double] = [:]
        for failures in (signInFreeFailures + 1)..<max(signInFreeFailures + 1, signInFailuresToLock) {
            delays[failures] = delaySeconds(afterFailures: failures)
        }
        return AttemptRule(limit: signInFailuresToLock, window: .idle(seconds: lockSeconds), lockSeconds: lockSeconds, delays: delays)
    }

    /// Failed sign-ins from one client IP (a success gives its attempt back).
    public var networkRule: AttemptRule { AttemptRule(limit: ipFailuresToLock, window: .idle(seconds: lockSeconds), lockSeconds: lockSeconds) }

    /// Unauthenticated Argon2 runs from one client IP.
    public var hashingRule: AttemptRule { AttemptRule(limit: max(1, ipHashesPerMinute), window: .fixed(seconds: 60)) }

    /// PIN checks for one profile.
    public var pinRule: AttemptRule {
        AttemptRule(limit: pinAttemptsMax, window: .idle(seconds: pinLockSeconds), lockSeconds: pinLockSeconds)
    }

    /// Code checks for one address and purpose, for the life of a code (known and unknown addresses alike).
    public var codeRule: AttemptRule { AttemptRule(limit: codeWrongAttemptsMax, window: .fixed(seconds: codeLifetimeSeconds)) }

    /// Mails of one purpose to one address: a cooldown between sends and an hourly maximum.
    public var mailRule: AttemptRule {
        AttemptRule(limit: max(1, mailSendsPerHourMax), window: .fixed(seconds: 3600), delayDefault: mailCooldownSeconds)
    }
}
