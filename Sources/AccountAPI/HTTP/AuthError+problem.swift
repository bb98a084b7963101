import Auth
import Hummingbird

extension AuthError {
    /// The problem each domain error is answered with (codes from DESIGN.md).
    var problem: Problem {
        switch self {
        case .validation(let detail): Problem.validation(detail)
        case .invalidCredentials: Problem(.unauthorized, code: "invalid_credentials", detail: "The email or password is incorrect.")
        case .passkeyNotAccepted:
            Problem(
                .unauthorized, code: "invalid_credentials",
                detail: "The passkey was not accepted; sign in another way, or register the passkey again.")
        case .secondFactorRequired:
            Problem(
                .forbidden, code: "mfa_required", detail: "Two-factor codes are on: send 'code' (from the authenticator app) or 'recoveryCode' too.")
        case .invalidPassword:
            Problem(.forbidden, code: "invalid_password", detail: "The current password given is not correct; the session stays signed in.")
        case .reauthenticationRequired:
            Problem(
                .forbidden, code: "reauthentication_required",
                detail:
                    "This makes lasting access and needs a recent sign-in: confirm your password with POST /api/auth/reauthenticate (or sign in again), then retry within 10 minutes."
            )
        case .emailNotVerified:
            Problem(.forbidden, code: "email_not_verified", detail: "Verify your email address first; POST /api/auth/resend-otp sends a new code.")
        case .accountLocked(let seconds):
            Problem(
                .tooManyRequests, code: "account_locked", detail: "Sign-in is locked after repeated failures; try again later or reset your password."
            )
            .retryAfter(seconds: seconds)
        case .rateLimited(let seconds, let detail): Problem(.tooManyRequests, code: "rate_limited", detail: detail).retryAfter(seconds: seconds)
        case .invalidOTP(let remaining):
            Problem(.badRequest, code: "invalid_otp", detail: "The code is not valid.").with("attemptsRemaining", .int(remaining))
        case .otpExpired: Problem(.badRequest, code: "otp_expired", detail: "The code has expired; request a new one.")
        case .tooManyAttempts(let seconds):
            Problem(.tooManyRequests, code: "too_many_attempts", detail: "Too many wrong codes; this code no longer works. Request a new one.")
                .retryAfter(seconds: seconds)
        case .otpAlreadyUsed:
            Problem(.conflict, code: "otp_already_used", detail: "This code was already used. If the address is verified, sign in instead.")
        case .ownerProfileRequired:
            Problem(
                .forbidden, code: "owner_profile_required",
                detail: "This is an account action: it needs the account owner's (default) profile. Select it with POST /api/profiles/select.")
        case .profileSelectionRequired:
            Problem(
                .forbidden, code: "profile_selection_required",
                detail: "The selected profile was deleted or is beyond your plan's profile limit; select a profile (GET /api/profiles/available).")
        case .unauthorized: Problem.unauthorized("The session is missing, expired or revoked; sign in again.")
        case .forbidden(let detail): Problem.forbidden(detail)
        case .notFound: Problem.notFound()
        case .conflict(let detail): Problem(.conflict, code: "already_exists", detail: detail)
        case .invalidPIN(let remaining):
            Problem(.forbidden, code: "invalid_pin", detail: "This profile needs its PIN; the PIN given is missing or wrong.")
                .with("attemptsRemaining", .int(remaining))
        case .pinLocked(let seconds):
            Problem(.tooManyRequests, code: "pin_locked", detail: "Too many wrong PINs; this profile is locked for a while.").retryAfter(
                seconds: seconds)
        case .profileLimitReached(let limit):
            Problem(
                .forbidden, code: "profile_limit_reached", detail: "Your plan allows \(limit) profile(s), the default one included; upgrade for more."
            )
            .with("maxFamilyProfiles", .int(limit))
        case .subscriptionRequired(let detail): Problem(.forbidden, code: "subscription_required", detail: detail)
        case .overloaded: Problem.unavailable("The server is busy; retry shortly.", retryAfterSeconds: 1)
        }
    }
}

extension AuthError {
    /// The text the problem's `detail` carries, for the command line.
    public var message: String { problem.detail }
}
