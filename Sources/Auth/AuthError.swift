/// Domain errors of the auth flows; the HTTP layer maps each to a problem with the same `code`.
public enum AuthError: Error, Equatable, Sendable {
    case validation(String)
    case invalidCredentials
    /// A passkey sign-in that failed (unknown credential, bad signature, a counter that went back): one answer for all.
    case passkeyNotAccepted
    /// Two-factor codes are on: this action needs a code (or a recovery code) too.
    case secondFactorRequired
    /// A password check behind a valid session failed (change-password, erasure, PIN changes): not a sign-out.
    case invalidPassword
    /// The action needs a recent authentication (``AuthPolicy/recentAuthenticationSeconds``): confirm the password with
    /// `POST /api/auth/reauthenticate` (or sign in again), then retry.
    case reauthenticationRequired
    case emailNotVerified
    /// Locked after too many failures; retry after the given seconds.
    case accountLocked(retryAfterSeconds: Int)
    /// Too many attempts too fast (growing delay, IP throttle, resend cooldown or budget).
    case rateLimited(retryAfterSeconds: Int, detail: String)
    case invalidOTP(attemptsRemaining: Int)
    case otpExpired
    /// The code took its last wrong attempt; ask for a new one.
    case tooManyAttempts(retryAfterSeconds: Int)
    /// The code is right but was already used (only someone holding the code learns this).
    case otpAlreadyUsed
    /// An account action from a session on a profile other than the owner's (default) one.
    case ownerProfileRequired
    /// The session's selected profile was deleted or is locked by the plan: it must select a profile first.
    case profileSelectionRequired
    case unauthorized
    case forbidden(String)
    case notFound
    case conflict(String)
    case invalidPIN(attemptsRemaining: Int)
    case pinLocked(retryAfterSeconds: Int)
    case profileLimitReached(limit: Int)
    case subscriptionRequired(String)
    /// The hashing pool is saturated.
    case overloaded
}
