import Foundation
import Storage

/// A receiver of events.
public struct WebhookEndpoint: Sendable, Equatable {
    public let id: String
    public let url: String
    public let description: String?
    public let events: [String]
    public let balanceLowThreshold: Int64?
    /// Set when deliveries stopped: the receiver answered 410, or an operator turned it off (PATCH `enabled: false`).
    public let disabledAt: Date?
    public let disabledReason: String?
    /// Until when the previous secret still signs alongside the current one (after a rotation).
    public let previousSecretExpiresAt: Date?
    public let createdAt: Date
    public let updatedAt: Date

    init(row: SQLRow, now: Date) throws {
        id = try row.string("id")
        url = try row.string("url")
        description = row.optionalString("description")
        events = try row.string("events").split(separator: ",").map(String.init)
        balanceLowThreshold = row.optionalInt("balance_low_threshold")
        disabledAt = row.optionalDate("disabled_at_ms")
        disabledReason = row.optionalString("disabled_reason")
        previousSecretExpiresAt = row.optionalDate("previous_secret_until_ms").flatMap { $0 > now ? $0 : nil }
        createdAt = try row.date("created_at_ms")
        updatedAt = try row.date("updated_at_ms")
    }
}

/// One event on its way to one endpoint: the same body and `webhook-id` on every try.
public struct WebhookDelivery: Sendable, Equatable {
    public let id: String
    public let endpointID: String
    public let eventID: String
    public let eventType: String
    /// pending, delivered or failed.
    public let status: String
    public let attempts: Int64
    public let lastStatusCode: Int64?
    public let lastError: String?
    public let lastAttemptAt: Date?
    /// When the next try is due (pending deliveries only).
    public let nextAttemptAt: Date?
    public let createdAt: Date
    public let deliveredAt: Date?
    public let body: String

    init(row: SQLRow) throws {
        id = try row.string("id")
        endpointID = try row.string("endpoint_id")
        eventID = try row.string("event_id")
        eventType = try row.string("event_type")
        status = try row.string("status")
        attempts = try row.int("attempts")
        lastStatusCode = row.optionalInt("last_status_code")
        lastError = row.optionalString("last_error")
        lastAttemptAt = row.optionalDate("last_attempt_at_ms")
        nextAttemptAt = status == "pending" ? row.optionalDate("next_attempt_at_ms") : nil
        createdAt = try row.date("created_at_ms")
        deliveredAt = row.optionalDate("delivered_at_ms")
        body = try row.string("body")
    }
}

/// One try of a delivery.
public struct WebhookAttempt: Sendable, Equatable {
    public let attempt: Int64
    public let at: Date
    public let statusCode: Int64?
    public let error: String?
    public let durationMilliseconds: Int64
}

/// What an operator sends to create or change an endpoint (nil: unchanged on PATCH).
public struct WebhookEndpointInput: Sendable {
    public var url: String?
    public var events: [String]?
    /// `.some(nil)` clears it.
    public var description: String??
    public var balanceLowThreshold: Int64??
    public var enabled: Bool?

    public init(
        url: String? = nil, events: [String]? = nil, description: String?? = nil, balanceLowThreshold: Int64?? = nil, enabled: Bool? = nil
    ) {
        self.url = url
        self.events = events
        self.description = description
        self.balanceLowThreshold = balanceLowThreshold
        self.enabled = enabled
    }
}

/// The delivery rules: retries, timeouts, in-flight bound, SSRF policy.
public struct WebhookSettings: Sendable {
    public var urlPolicy = WebhookURLPolicy()
    /// First retry delay; each later one doubles (capped at `retryDelayMaxSeconds`), ±25 % jitter.
    public var retryBaseSeconds: Double = 5
    public var retryDelayMaxSeconds: Double = 6 * 3600
    /// A delivery is retried until this long after its event (then `failed`).
    public var retryWindowSeconds: Double = 3 * 24 * 3600
    /// One try's whole time (connect, send, answer).
    public var timeoutSeconds: Double = 10
    /// Tries in flight at once on one node.
    public var maxInFlight = 32
    /// How often the worker looks for work when idle.
    public var pollSeconds: Double = 1
    /// Endpoints at most (a limit on fan-out per event).
    public var endpointsMax = 50
    /// How long the previous secret keeps signing after a rotation.
    public var rotationOverlapSeconds: Double = 24 * 3600

    public init() {}

    /// The delay after `attempts` failed tries (1 → base), with jitter.
    public func retryDelay(afterAttempts attempts: Int64, jitter: Double = Double.random(in: 0.75...1.25)) -> Double {
        let exponent = Double(max(0, min(attempts - 1, 40)))
        return min(retryBaseSeconds * pow(2, exponent), retryDelayMaxSeconds) * jitter
    }
}
