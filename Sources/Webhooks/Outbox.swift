import Clock
import Events
import Foundation
import Storage

/// The event names (the contract receivers subscribe to).
public enum WebhookEventType: String, Sendable, CaseIterable {
    case userCreated = "user.created"
    case userVerified = "user.verified"
    case userDeleted = "user.deleted"
    case subscriptionUpdated = "subscription.updated"
    case tokensGranted = "tokens.granted"
    case tokensSpent = "tokens.spent"
    case tokensDebited = "tokens.debited"
    case transferReversed = "transfer.reversed"
    case holdCreated = "hold.created"
    case holdCaptured = "hold.captured"
    case holdVoided = "hold.voided"
    case holdExpired = "hold.expired"
    case packUnlocked = "pack.unlocked"
    case purchaseRequestCreated = "purchase_request.created"
    case purchaseRequestResolved = "purchase_request.resolved"
    case balanceLow = "balance.low"
    case refundClawedBack = "refund.clawed_back"
    /// Sent only by `POST /api/admin/webhooks/{id}/test`, to that endpoint.
    case webhookTest = "webhook.test"

    /// What an endpoint may subscribe to (every type but the test ping, which always reaches its endpoint).
    public static var subscribable: [String] { allCases.filter { $0 != .webhookTest }.map(\.rawValue) }
}

/// The transactional outbox (`outbox_events`, owned here with the endpoint and delivery tables): every module records its
/// events through this ``EventSink`` inside the transaction that made the change, so an event exists exactly when the change
/// committed (kill -9 included). The worker (``WebhookWorker``) fans them out to endpoints afterwards.
public struct Outbox: EventSink {
    public init() {}

    /// Writes the event when some enabled endpoint takes it (its type, or `balance.low` for a balance change); an event
    /// no endpoint takes is never delivered to anyone (endpoints receive events that happen after they are created), so it
    /// is not written. The check is part of the same INSERT, so it costs no extra round trip.
    public func emit(_ tx: any SQLExecutor, _ event: DomainEvent, at: Date) async throws {
        try await tx.query(
            Self.emitSQL,
            [
                Self.newEventID(at: at), event.type, event.userID, EventValue.object(event.data).json, event.balanceBefore, event.balanceAfter, at,
                event.type, event.balanceAfter,
            ])
    }

    /// Built once (every ledger write runs it).
    static let emitSQL = """
        INSERT INTO outbox_events (id, type, user_id, data, balance_before, balance_after, created_at_ms)
        SELECT CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT)
        WHERE \(subscribed(type: "CAST(? AS TEXT)", balance: "CAST(? AS BIGINT)"))
        """

    /// PostgreSQL only (the one-statement spend); `WebhookHTTPTests.everyEventTypeIsDeliveredOnceWithAValidSignature` checks
    /// the event it records against the transactional path's fields.
    public func insertFromCTE(named cte: String) -> String? {
        """
        INSERT INTO outbox_events (id, type, user_id, data, balance_before, balance_after, created_at_ms)
        SELECT 'evt_' || lpad(to_hex(at_ms), 12, '0') || left(replace(gen_random_uuid()::TEXT, '-', ''), 20), event_type, user_id, data, balance_before, balance_after, at_ms FROM \(cte)
        WHERE \(Self.subscribed(type: "event_type", balance: "balance_after"))
        """
    }

    /// SQL: an enabled endpoint takes an event of `type` (an expression), or takes `balance.low` and the event changed a
    /// balance (`balance`, an expression, is not null).
    static func subscribed(type: String, balance: String) -> String {
        """
        EXISTS (SELECT 1 FROM webhook_endpoints WHERE deleted_at_ms IS NULL AND disabled_at_ms IS NULL
            AND (',' || events || ',' LIKE '%,' || \(type) || ',%' OR (\(balance) IS NOT NULL AND ',' || events || ',' LIKE '%,balance.low,%')))
        """
    }

    /// `evt_` and 32 hex digits, the first 12 the creation time in milliseconds (so new rows append to the primary key's
    /// index instead of landing at random places): the `webhook-id` receivers deduplicate on.
    static func newEventID(at date: Date) -> String {
        let time = String(UInt64(max(0, date.epochMilliseconds)), radix: 16)
        let random = FreshID.hex()
        return "evt_" + String(repeating: "0", count: max(0, 12 - time.count)) + time + random.prefix(20)
    }

}
