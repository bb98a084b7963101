import Foundation

/// The limits of the auth flows, in one place (DESIGN.md security parameters).
public struct AuthPolicy: Sendable {
    public var codeLifetimeSeconds: Double = 10 * 60
    public var codeWrongAttemptsMax = 5
    public var resendCooldownSeconds: Double = 60
    public var mailSendsPerHourMax = 5
    public var sessionAbsoluteSeconds: Double = 30 * 24 * 3600
    public var sessionIdleSeconds: Double = 7 * 24 * 3600
    /// `last_used_at` is written at most this often per session (not on every request).
    public var sessionTouchIntervalSeconds: Double = 60
    /// Consecutive failed sign-ins for one address before the growing delays start.
    public var signInFreeFailures = 4
    /// Consecutive failed sign-ins for one address that lock it.
    public var signInFailuresToLock = 10
    /// Failed sign-ins from one client IP that lock the IP (higher: many users share NAT addresses).
    public var ipFailuresToLock = 50
    public var lockSeconds: Double = 15 * 60
    /// A session whose password proof is younger than this may change PINs without `currentPassword`.
    public var recentAuthenticationSeconds: Double = 10 * 60

    public init() {}

    /// Seconds an address must wait after `failures` consecutive failures: 0 up to `signInFreeFailures`,
    /// then 1, 2, 4, 8, 16 s … until the lock.
    public func delaySeconds(afterFailures failures: Int) -> Double {
        guard failures > signInFreeFailures else { return 0 }
        return Double(1 << min(failures - signInFreeFailures - 1, 10))
    }
}
