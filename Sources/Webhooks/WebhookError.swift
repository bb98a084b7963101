/// What the webhook operations refuse.
public enum WebhookError: Error, Equatable, Sendable {
    /// Bad input (the detail names the field).
    case invalid(String)
    /// No such endpoint (or delivery).
    case notFound
}
