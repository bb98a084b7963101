import Clock
import Foundation
import Logging
import Metrics
import Secrets
import Storage
import Traces

/// How a try went, as the sender saw it.
public enum SendOutcome: Sendable, Equatable {
    case status(Int)
    /// No answer: connection refused, timeout, TLS failure, refused address …
    case failure(String)
}

/// Posts one signed body (async-http-client in production, ``HTTPWebhookSender``).
public protocol WebhookSender: Sendable {
    func send(url: String, headers: [(String, String)], body: String, timeoutSeconds: Double) async -> SendOutcome
}

extension WebhookWorker {
    struct Claimed: Sendable {
        let id: String
        let endpointID: String
        let eventID: String
        let body: String
        let attempt: Int64
        let retryUntil: Date
        let url: String
        let secrets: [String]
        /// Set when the endpoint's secret could not be opened (SERVER_SECRET changed): the try fails without sending.
        let problem: String?
    }

    /// The service's connections keep the generic plan a statement got on its first call. Made while the pending
    /// deliveries were few (or never analysed), the claim's plan sorted every pending delivery, so a burst (a million
    /// events fanned out, an endpoint down for a day) made each claim read the whole backlog: 667 ms at a million.
    /// Planned with sorts and bitmap scans off (PostgreSQL, in the claim's transaction), it walks the due index in
    /// order and stops after `limit` rows, whatever the statistics said at the time (`WebhookClaimPlanTests`). Both
    /// settings in one statement: each round trip of the claim's transaction is time it is open.
    static let claimPlannerSettings = ["SELECT set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true)"]

    /// Binds: lock until, attempt time, now, now, limit.
    static func claimStatement(postgres: Bool) -> String {
        """
        UPDATE webhook_deliveries SET locked_until_ms = ?, attempts = attempts + 1, last_attempt_at_ms = ?
        WHERE id IN (
            SELECT d.id FROM webhook_deliveries d WHERE d.status = 'pending' AND d.next_attempt_at_ms <= ?
                AND (d.locked_until_ms IS NULL OR d.locked_until_ms <= ?)
                AND d.endpoint_id IN (SELECT id FROM webhook_endpoints WHERE deleted_at_ms IS NULL AND disabled_at_ms IS NULL)
            ORDER BY d.next_attempt_at_ms LIMIT ?\(postgres ? " FOR UPDATE SKIP LOCKED" : ""))
        RETURNING id, endpoint_id, event_id, body, attempts, retry_until_ms
        """
    }

    /// Leases due deliveries of enabled endpoints (the attempt number raised now, so a try that dies still counts).
    func claim(limit: Int) async throws -> [Claimed] {
        let rows = try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            if tx.engine == .postgres { for setting in Self.claimPlannerSettings { try await tx.query(setting) } }
            return try await tx.query(
                Self.claimStatement(postgres: tx.engine == .postgres), [now.addingTimeInterval(settings.timeoutSeconds + 30), now, now, now, limit])
        }
        guard !rows.isEmpty else { return [] }
        let endpointIDs = Set(try rows.map { try $0.string("endpoint_id") })
        let endpoints = try await database.withConnection(logger: logger) { tx in
            var found: [String: SQLRow] = [:]
            for id in endpointIDs { found[id] = try await tx.first("SELECT * FROM webhook_endpoints WHERE id = ?", [id]) }
            return found
        }
        let now = clock.now()
        // Each endpoint's secrets are opened once a pass.
        var keys: [String: (secrets: [String], problem: String?)] = [:]
        for (id, endpoint) in endpoints {
            do {
                var secrets = [try box.open(try endpoint.string("secret_sealed"))]
                if let previous = endpoint.optionalString("previous_secret_sealed"), let until = endpoint.optionalDate("previous_secret_until_ms"),
                    until > now
                {
                    secrets.append(try box.open(previous))
                }
                keys[id] = (secrets, nil)
            } catch {
                keys[id] = ([], "the endpoint's secret cannot be opened (was SERVER_SECRET changed?); rotate the secret")
            }
        }
        return try rows.compactMap { row in
            let endpointID = try row.string("endpoint_id")
            guard let endpoint = endpoints[endpointID], let key = keys[endpointID] else { return nil }
            return Claimed(
                id: try row.string("id"), endpointID: endpointID, eventID: try row.string("event_id"), body: try row.string("body"),
                attempt: try row.int("attempts"), retryUntil: try row.date("retry_until_ms"), url: try endpoint.string("url"), secrets: key.secrets,
                problem: key.problem)
        }
    }

    struct Try: Sendable {
        let delivery: Claimed
        let outcome: SendOutcome
        let started: Date
        let finished: Date
    }

    /// One try of one delivery (recorded with the others of its pass).
    func attempt(_ delivery: Claimed, refused: String?) async -> Try {
        let started = clock.now()
        let outcome: SendOutcome
        if let problem = delivery.problem {
            outcome = .failure(problem)
        } else if let refused {
            outcome = .failure(refused)
        } else {
            let timestamp = Int64(started.timeIntervalSince1970)
            let headers = [
                ("content-type", "application/json"), ("user-agent", "account-service-webhooks/1"), ("webhook-id", delivery.eventID),
                ("webhook-timestamp", String(timestamp)),
                (
                    "webhook-signature",
                    WebhookSigner.header(secrets: delivery.secrets, id: delivery.eventID, timestamp: timestamp, body: delivery.body)
                ),
            ]
            // Traced as a client span; its W3C trace context goes to the receiver (`traceparent`).
            outcome = await Traces.span(
                "webhook.send", client: true, attributes: ["webhook.event_id": delivery.eventID, "webhook.attempt": "\(delivery.attempt)"]
            ) {
                let traced = headers + Traces.outgoingHeaders().map { ($0.name, $0.value) }
                return await sender.send(url: delivery.url, headers: traced, body: delivery.body, timeoutSeconds: settings.timeoutSeconds)
            }
        }
        return Try(delivery: delivery, outcome: outcome, started: started, finished: clock.now())
    }

    /// Records a pass's tries in one transaction of three statements (every try, the deliveries' new states, and any
    /// endpoint a 410 disables): 2xx delivers, 5xx/408/429/no answer retries (with backoff, within the window), 410
    /// fails and disables the endpoint, any other answer fails.
    func record(_ tries: [Try]) async throws {
        guard !tries.isEmpty else { return }
        var attemptBinds: [any SQLBindable] = []
        var stateBinds: [any SQLBindable] = []
        var gone: Set<String> = []
        for attempt in tries {
            let delivery = attempt.delivery
            let now = attempt.finished
            let (code, error): (Int64?, String?) =
                switch attempt.outcome {
                case .status(let code): (Int64(code), nil)
                case .failure(let message): (nil, String(message.prefix(300)))
                }
            let status: String
            var next = now
            if let code, (200..<300).contains(code) {
                status = "delivered"
            } else if let code, code != 408, code != 429, code < 500 {
                status = "failed"
                if code == 410 { gone.insert(delivery.endpointID) }
            } else {
                next = now.addingTimeInterval(settings.retryDelay(afterAttempts: delivery.attempt))
                status = next <= delivery.retryUntil ? "pending" : "failed"
            }
            Counter(label: "webhook_attempts", dimensions: [("outcome", status)]).increment()
            attemptBinds += [
                delivery.id, delivery.attempt, attempt.started, code, error, max(0, now.epochMilliseconds - attempt.started.epochMilliseconds),
            ]
            stateBinds += [delivery.id, delivery.attempt, status, next, code, error, status == "delivered" ? now : nil]
        }
        let finished = tries.map(\.finished).max() ?? clock.now()
        func rows(_ row: String) -> String { Array(repeating: row, count: tries.count).joined(separator: ", ") }
        let insertAttempts = """
            INSERT INTO webhook_attempts (delivery_id, attempt, at_ms, status_code, error, duration_ms)
            VALUES \(rows("(?, ?, ?, ?, ?, ?)")) ON CONFLICT (delivery_id, attempt) DO NOTHING
            """
        let updateStates = Self.recordStatement(rows: tries.count)
        let (attempts, states, disabled) = (attemptBinds, stateBinds + ["pending"], gone)
        try await database.transaction(logger: logger) { tx in
            try await tx.query(insertAttempts, attempts)
            try await tx.query(updateStates, states)
            for endpoint in disabled {
                try await tx.query(
                    "UPDATE webhook_endpoints SET disabled_at_ms = ?, disabled_reason = ? WHERE id = ? AND disabled_at_ms IS NULL",
                    [finished, "the receiver answered 410 Gone", endpoint])
            }
        }
    }

    /// The new states of `rows` tries, recorded by their lease holders only (a lapsed lease taken over by another node is
    /// theirs now). Binds: seven per row (id, attempt, status, next try, code, error, delivered at), then 'pending'. The
    /// states are a UNION ALL of one-row SELECTs (SQLite cannot name a VALUES list's columns). The pending check is a
    /// bind, not a literal: with a literal, a generic plan made while the statistics said no delivery was pending reads
    /// the partial index of pending deliveries whole (every one of a million-event burst) instead of looking each row up
    /// by its key (`WebhookClaimPlanTests`).
    static func recordStatement(rows: Int) -> String {
        let state = """
            SELECT CAST(? AS TEXT) AS id, CAST(? AS BIGINT) AS attempt, CAST(? AS TEXT) AS status, CAST(? AS BIGINT) AS next_ms,
                CAST(? AS BIGINT) AS code, CAST(? AS TEXT) AS error, CAST(? AS BIGINT) AS delivered_ms
            """
        return """
            UPDATE webhook_deliveries SET status = v.status, next_attempt_at_ms = v.next_ms, locked_until_ms = NULL,
                last_status_code = v.code, last_error = v.error, delivered_at_ms = v.delivered_ms
            FROM (\(Array(repeating: state, count: rows).joined(separator: " UNION ALL "))) AS v
            WHERE webhook_deliveries.id = v.id AND webhook_deliveries.attempts = v.attempt AND webhook_deliveries.status = CAST(? AS TEXT)
            """
    }
}
