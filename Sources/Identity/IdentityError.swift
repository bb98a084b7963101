/// Why an identity token was refused.
public enum IdentityError: Error, Equatable, Sendable {
    /// The token is not a valid identity token for this service (the detail says which check failed).
    case invalid(String)
    /// The issuer's keys cannot be fetched (503; nothing is accepted meanwhile).
    case unavailable(String)
}
