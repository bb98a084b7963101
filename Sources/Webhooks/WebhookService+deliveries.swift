import Clock
import Events
import Foundation
import Logging
import Storage

extension WebhookService {
    public static let deliveriesPageMax = 100

    /// Newest first; `status` filters (pending, delivered, failed); `cursor` is the previous page's `nextCursor`.
    public func deliveries(
        endpointID: String, status: String?, limit: Int, cursor: String?, logger: Logger
    ) async throws -> (deliveries: [WebhookDelivery], nextCursor: String?) {
        if let status, !["pending", "delivered", "failed"].contains(status) {
            throw WebhookError.invalid("Query 'status' must be one of pending, delivered, failed (got '\(status.prefix(20))').")
        }
        let after = try cursor.map(Self.parseCursor)
        let pageSize = min(max(limit, 1), Self.deliveriesPageMax)
        return try await database.withConnection(logger: logger) { tx in
            _ = try await load(tx, id: endpointID, now: clock.now())
            var sql = "SELECT * FROM webhook_deliveries WHERE endpoint_id = ?"
            var binds: [any SQLBindable] = [endpointID]
            if let status {
                sql += " AND status = ?"
                binds.append(status)
            }
            if let after {
                sql += " AND (created_at_ms < ? OR (created_at_ms = ? AND id < ?))"
                binds += [after.0, after.0, after.1]
            }
            let rows = try await tx.query(sql + " ORDER BY created_at_ms DESC, id DESC LIMIT ?", binds + [pageSize + 1])
            let page = try rows.prefix(pageSize).map(WebhookDelivery.init)
            let next = rows.count > pageSize ? page.last.map { "\($0.createdAt.epochMilliseconds)_\($0.id)" } : nil
            return (page, next)
        }
    }

    /// One delivery and every try of it.
    public func delivery(endpointID: String, id: String, logger: Logger) async throws -> (WebhookDelivery, [WebhookAttempt]) {
        try await database.withConnection(logger: logger) { tx in
            guard let row = try await tx.first("SELECT * FROM webhook_deliveries WHERE id = ? AND endpoint_id = ?", [id, endpointID]) else {
                throw WebhookError.notFound
            }
            let attempts = try await tx.query("SELECT * FROM webhook_attempts WHERE delivery_id = ? ORDER BY attempt", [id]).map { row in
                WebhookAttempt(
                    attempt: try row.int("attempt"), at: try row.date("at_ms"), statusCode: row.optionalInt("status_code"),
                    error: row.optionalString("error"), durationMilliseconds: try row.int("duration_ms"))
            }
            return (try WebhookDelivery(row: row), attempts)
        }
    }

    /// Queues the delivery again now (failed, or pending with a later try; a delivered one is sent again with the same
    /// `webhook-id`, which receivers deduplicate on). The retry window starts again.
    public func retry(endpointID: String, id: String, actor: String, ip: String?, logger: Logger) async throws -> WebhookDelivery {
        try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            let endpoint = try await load(tx, id: endpointID, now: now)
            guard endpoint.disabledAt == nil else {
                throw WebhookError.invalid("The endpoint is disabled (\(endpoint.disabledReason ?? "")); enable it with PATCH first.")
            }
            let rows = try await tx.query(
                """
                UPDATE webhook_deliveries SET status = 'pending', next_attempt_at_ms = ?, retry_until_ms = ?, locked_until_ms = NULL
                WHERE id = ? AND endpoint_id = ? RETURNING *
                """, [now, now.addingTimeInterval(settings.retryWindowSeconds), id, endpointID])
            guard let row = rows.first else { throw WebhookError.notFound }
            try await audit.record(tx, at: now, actor: actor, action: "webhook_delivery_retried", subject: id, ip: ip, detail: endpointID)
            return try WebhookDelivery(row: row)
        }
    }

    /// Queues a `webhook.test` event to this endpoint alone (whatever it subscribes to).
    public func test(endpointID: String, actor: String, ip: String?, logger: Logger) async throws -> WebhookDelivery {
        try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            let endpoint = try await load(tx, id: endpointID, now: now)
            guard endpoint.disabledAt == nil else {
                throw WebhookError.invalid("The endpoint is disabled (\(endpoint.disabledReason ?? "")); enable it with PATCH first.")
            }
            let eventID = Outbox.newEventID(at: now)
            let body = WebhookBody.render(
                type: WebhookEventType.webhookTest.rawValue, at: now, data: ["endpointId": .string(endpoint.id), "message": .string("It works.")])
            try await WebhookWorker.insertDeliveries(
                tx,
                [
                    .init(
                        endpointID: endpoint.id, eventID: eventID, type: WebhookEventType.webhookTest.rawValue, body: body, outboxID: eventID,
                        userID: nil)
                ],
                now: now,
                retryUntil: now.addingTimeInterval(settings.retryWindowSeconds))
            let row = try await tx.first("SELECT * FROM webhook_deliveries WHERE endpoint_id = ? AND event_id = ?", [endpoint.id, eventID])
            try await audit.record(tx, at: now, actor: actor, action: "webhook_tested", subject: endpointID, ip: ip, detail: nil)
            guard let row else { throw WebhookError.notFound }
            return try WebhookDelivery(row: row)
        }
    }

    static func parseCursor(_ text: String) throws -> (Int64, String) {
        let parts = text.split(separator: "_", maxSplits: 1)
        guard parts.count == 2, let at = Int64(parts[0]), parts[1].utf8.count <= 64 else {
            throw WebhookError.invalid("Query 'cursor' must be a nextCursor from a previous page.")
        }
        return (at, String(parts[1]))
    }
}

/// The Standard Webhooks body: `{"type", "timestamp", "data"}`.
enum WebhookBody {
    static func render(type: String, at: Date, data: [String: EventValue]) -> String {
        render(type: type, at: at, dataJSON: EventValue.object(data).json)
    }

    static func render(type: String, at: Date, dataJSON: String) -> String {
        "{\"type\":\(EventValue.string(type).json),\"timestamp\":\"\(timestamp(at))\",\"data\":\(dataJSON)}"
    }

    static func timestamp(_ date: Date) -> String { ISOTime.string(date) }
}
