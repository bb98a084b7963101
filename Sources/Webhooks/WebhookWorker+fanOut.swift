import Clock
import Events
import Foundation
import Storage
import Traces

extension WebhookWorker {
    /// Events read a fan-out pass.
    static let fanOutBatch = 100
    /// Deliveries a claiming write inserts at most (an event's deliveries are never split; with at most
    /// ``WebhookSettings/endpointsMax`` endpoints one event makes at most twice that).
    static let deliveriesPerClaim = 100

    struct Target {
        let id: String
        let events: Set<String>
        let threshold: Int64?
        let createdAt: Date
    }

    struct NewDelivery {
        let endpointID: String
        let eventID: String
        let type: String
        let body: String
        /// The outbox event it comes from (`eventID` is that event's id, or it with `_low` for `balance.low`).
        let outboxID: String
        /// The event's user (an erasure redacts its deliveries, ``WebhookService/accountErased(_:userID:)``).
        let userID: String?
    }

    /// Outbox events claimed together with the deliveries they make.
    struct Claim {
        var eventIDs: [String] = []
        var deliveries: [NewDelivery] = []
    }

    /// One fan-out pass over up to `limit` events at the outbox's head, or after the event `after` (the last one the
    /// previous pass read: the claimed events before it may still be dead rows at the index's head, which a read from
    /// the head walks again every pass); returns how many it read and the last one's id.
    ///
    /// No lock waits on the service. The events are read first, without a lock, then the endpoints (after the events,
    /// so an endpoint whose creation committed before an event's is seen), and the deliveries are rendered. Then each
    /// group of events is claimed in one write together with its deliveries: the events still in the outbox leave it,
    /// and only their deliveries go in. On PostgreSQL that write is one statement, and an event another node is claiming
    /// at that moment is skipped (`SKIP LOCKED`), so a lock lasts one statement, however busy the service is (a burst
    /// of a million events held one for 98–155 ms when the claim, the rendering and the inserts shared a transaction).
    /// On SQLite, the only writer, it is one short transaction.
    func fanOut(limit: Int, after: String?) async throws -> (read: Int, last: String?) {
        let events = try await database.withConnection(logger: logger) { db in
            if let after { return try await db.query("SELECT * FROM outbox_events WHERE id > ? ORDER BY id LIMIT ?", [after, limit]) }
            return try await db.query("SELECT * FROM outbox_events ORDER BY id LIMIT ?", [limit])
        }
        guard !events.isEmpty else { return (0, nil) }
        let targets = try await database.withConnection(logger: logger) { db in
            try await db.query("SELECT * FROM webhook_endpoints WHERE \(Self.live)").map { row in
                Target(
                    id: try row.string("id"), events: Set(try row.string("events").split(separator: ",").map(String.init)),
                    threshold: row.optionalInt("balance_low_threshold"), createdAt: try row.date("created_at_ms"))
            }
        }
        var claims: [Claim] = []
        var current = Claim()
        for event in events {
            let deliveries = try fanOut(event: event, to: targets)
            if !current.eventIDs.isEmpty && current.deliveries.count + deliveries.count > Self.deliveriesPerClaim {
                claims.append(current)
                current = Claim()
            }
            current.eventIDs.append(try event.string("id"))
            current.deliveries += deliveries
        }
        claims.append(current)
        let now = clock.now()
        for claim in claims { try await self.claim(claim, now: now) }
        return (events.count, try events.last?.string("id"))
    }

    /// A pass from the outbox's head.
    func fanOut(limit: Int) async throws -> Int { try await fanOut(limit: limit, after: nil).read }

    /// Passes of the fan-out loop, each after the last event the previous one read. An event whose transaction
    /// committed after later ids were read sits behind that cursor, so the cursor goes back to the head after a pass
    /// that read less than a batch (the backlog is drained) and every ``fanOutPassesPerRestart`` passes (a long
    /// burst delays such an event by at most that many batches).
    func fanOutPasses(keepGoing: @escaping @Sendable () -> Bool) async {
        var after: String?
        var passes = 0
        await loop("fan-out", keepGoing) {
            passes += 1
            let from = passes % Self.fanOutPassesPerRestart == 0 ? nil : after
            let (read, last) = try await Traces.span("job.webhook_fan_out") { try await fanOut(limit: Self.fanOutBatch, after: from) }
            after = read < Self.fanOutBatch ? nil : last
            return read > 0
        }
    }

    static let fanOutPassesPerRestart = 50

    /// The endpoints that take deliveries. Read again in the claiming write: an endpoint deleted or disabled since the
    /// pass read the endpoints gets no delivery (a deleted one's would stay pending for good; its pending deliveries were
    /// failed when it was deleted).
    static let liveEndpoints = "SELECT id FROM webhook_endpoints WHERE \(live)"
    static let live = "deleted_at_ms IS NULL AND disabled_at_ms IS NULL"

    /// The events of `claim` still in the outbox leave it, and their deliveries go in, in one write.
    func claim(_ claim: Claim, now: Date) async throws {
        let until = now.addingTimeInterval(settings.retryWindowSeconds)
        let ids: [any SQLBindable] = claim.eventIDs
        let list = Array(repeating: "?", count: ids.count).joined(separator: ", ")
        guard database.engine == .postgres else {
            try await database.transaction(logger: logger) { tx in
                let claimed = Set(try await tx.query("DELETE FROM outbox_events WHERE id IN (\(list)) RETURNING id", ids).map { try $0.string("id") })
                let live = Set(try await tx.query(Self.liveEndpoints).map { try $0.string("id") })
                let deliveries = claim.deliveries.filter { claimed.contains($0.outboxID) && live.contains($0.endpointID) }
                try await Self.insertDeliveries(tx, deliveries, now: now, retryUntil: until)
            }
            return
        }
        let claimed = "DELETE FROM outbox_events WHERE id IN (SELECT id FROM outbox_events WHERE id IN (\(list)) FOR UPDATE SKIP LOCKED) RETURNING id"
        guard !claim.deliveries.isEmpty else {
            _ = try await database.withConnection(logger: logger) { try await $0.query(claimed, ids) }
            return
        }
        var binds = ids + [now, until, now]
        for delivery in claim.deliveries {
            binds += [Self.newDeliveryID(), delivery.endpointID, delivery.eventID, delivery.outboxID, delivery.type, delivery.body, delivery.userID]
        }
        let row = "(CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT))"
        let sql = """
            WITH claimed AS (\(claimed))
            INSERT INTO webhook_deliveries (id, endpoint_id, event_id, event_type, body, status, attempts, next_attempt_at_ms, retry_until_ms, created_at_ms,
                                            user_id)
            SELECT d.id, d.endpoint_id, d.event_id, d.event_type, d.body, 'pending', 0, CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT), d.user_id
            FROM (VALUES \(Array(repeating: row, count: claim.deliveries.count).joined(separator: ", "))) AS d(id, endpoint_id, event_id, outbox_id, event_type, body,
                                                                                                            user_id)
            JOIN claimed ON claimed.id = d.outbox_id
            WHERE d.endpoint_id IN (\(Self.liveEndpoints))
            ON CONFLICT (endpoint_id, event_id) DO NOTHING
            """
        let values = binds
        _ = try await database.withConnection(logger: logger) { try await $0.query(sql, values) }
    }

    /// The deliveries one event makes: one per subscribed endpoint created before it, plus `balance.low` where the change
    /// crossed an endpoint's threshold downwards.
    func fanOut(event: SQLRow, to targets: [Target]) throws -> [NewDelivery] {
        let id = try event.string("id")
        let type = try event.string("type")
        let at = try event.date("created_at_ms")
        let body = WebhookBody.render(type: type, at: at, dataJSON: try event.string("data"))  // once per event, whatever the endpoints
        let user = event.optionalString("user_id")
        var out: [NewDelivery] = []
        for target in targets where target.createdAt <= at {
            if target.events.contains(type) {
                out.append(NewDelivery(endpointID: target.id, eventID: id, type: type, body: body, outboxID: id, userID: user))
            }
            if target.events.contains(WebhookEventType.balanceLow.rawValue), let threshold = target.threshold,
                let before = event.optionalInt("balance_before"), let after = event.optionalInt("balance_after"), before >= threshold,
                after < threshold
            {
                let data: [String: EventValue] = [
                    "userId": .optional(event.optionalString("user_id")), "threshold": .int(threshold), "totalTokens": .int(after),
                    "previousTotalTokens": .int(before), "causeEventId": .string(id), "causeEventType": .string(type),
                ]
                let low = WebhookEventType.balanceLow.rawValue
                out.append(
                    NewDelivery(
                        endpointID: target.id, eventID: id + "_low", type: low, body: WebhookBody.render(type: low, at: at, data: data), outboxID: id,
                        userID: user)
                )
            }
        }
        return out
    }

    static func newDeliveryID() -> String { "whd_" + FreshID.hex() }

    /// Pending deliveries due now, in one statement (an endpoint that already has an event keeps its delivery).
    static func insertDeliveries(_ tx: any SQLExecutor, _ deliveries: [NewDelivery], now: Date, retryUntil: Date) async throws {
        guard !deliveries.isEmpty else { return }
        var binds: [any SQLBindable] = []
        for delivery in deliveries {
            binds += [newDeliveryID(), delivery.endpointID, delivery.eventID, delivery.type, delivery.body, now, retryUntil, now, delivery.userID]
        }
        try await tx.query(
            """
            INSERT INTO webhook_deliveries (id, endpoint_id, event_id, event_type, body, status, attempts, next_attempt_at_ms, retry_until_ms, created_at_ms,
                                            user_id)
            VALUES \(Array(repeating: "(?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?)", count: deliveries.count).joined(separator: ", "))
            ON CONFLICT (endpoint_id, event_id) DO NOTHING
            """, binds)
    }
}
