import Foundation
import Webhooks

struct WebhookEndpointJSON: ExplicitNulls, Sendable {
    let id: String
    let url: String
    let description: String?
    let events: [String]
    let balanceLowThreshold: Int64?
    let enabled: Bool
    let disabledAt: String?
    let disabledReason: String?
    let previousSecretExpiresAt: String?
    let createdAt: String
    let updatedAt: String

    init(_ e: WebhookEndpoint) {
        (id, url, description, events, balanceLowThreshold) = (e.id, e.url, e.description, e.events, e.balanceLowThreshold)
        (enabled, disabledAt, disabledReason) = (e.disabledAt == nil, e.disabledAt.map(ISODate.string), e.disabledReason)
        previousSecretExpiresAt = e.previousSecretExpiresAt.map(ISODate.string)
        (createdAt, updatedAt) = (ISODate.string(e.createdAt), ISODate.string(e.updatedAt))
    }

}

/// An endpoint with its secret: only the answers of create and rotate-secret.
struct WebhookEndpointWithSecretJSON: Encodable, Sendable {
    let endpoint: WebhookEndpointJSON
    let secret: String

    func encode(to encoder: any Encoder) throws {
        try endpoint.encode(to: encoder)
        var c = encoder.container(keyedBy: Keys.self)
        try c.encode(secret, forKey: .secret)
    }

    enum Keys: String, CodingKey { case secret }
}

struct WebhookDeliveryJSON: ExplicitNulls, Sendable {
    static let omittedWhenNil: Set<String> = ["payload", "attemptLog"]
    let id: String
    let endpointId: String
    let eventId: String
    let eventType: String
    let status: String
    let attempts: Int64
    let lastStatusCode: Int64?
    let lastError: String?
    let lastAttemptAt: String?
    let nextAttemptAt: String?
    let createdAt: String
    let deliveredAt: String?
    let payload: JSONValue?
    let attemptLog: [AttemptJSON]?

    struct AttemptJSON: Encodable, Sendable {
        let attempt: Int64
        let at: String
        let statusCode: Int64?
        let error: String?
        let durationMs: Int64
    }

    init(_ d: WebhookDelivery, attempts log: [WebhookAttempt]? = nil) {
        (id, endpointId, eventId, eventType, status, attempts) = (d.id, d.endpointID, d.eventID, d.eventType, d.status, d.attempts)
        (lastStatusCode, lastError, lastAttemptAt) = (d.lastStatusCode, d.lastError, d.lastAttemptAt.map(ISODate.string))
        (nextAttemptAt, createdAt, deliveredAt) = (
            d.nextAttemptAt.map(ISODate.string), ISODate.string(d.createdAt), d.deliveredAt.map(ISODate.string)
        )
        payload = log == nil ? nil : try? JSONDecoder().decode(JSONValue.self, from: Data(d.body.utf8))
        attemptLog = log?.map {
            AttemptJSON(
                attempt: $0.attempt, at: ISODate.string($0.at), statusCode: $0.statusCode, error: $0.error, durationMs: $0.durationMilliseconds)
        }
    }

}

struct WebhookDeliveriesJSON: ExplicitNulls, Sendable {
    let deliveries: [WebhookDeliveryJSON]
    let nextCursor: String?

}
