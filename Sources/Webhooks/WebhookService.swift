import Clock
import Events
import Foundation
import Logging
import Secrets
import Storage

/// Endpoints and their deliveries, as operators manage them (`/api/admin/webhooks`). Secrets are shown once (create,
/// rotate) and stored sealed (``SecretBox``). Every change is audited in its transaction.
public struct WebhookService: Sendable {
    public static let descriptionBytesMax = 500
    public static let thresholdMax: Int64 = 1_000_000_000_000
    let database: any Database
    let box: SecretBox
    let audit: any AuditTrail
    let clock: any TimeSource
    public let settings: WebhookSettings

    public init(database: any Database, box: SecretBox, audit: any AuditTrail, clock: any TimeSource, settings: WebhookSettings) {
        self.database = database
        self.box = box
        self.audit = audit
        self.clock = clock
        self.settings = settings
    }

    /// A check of the caller's credential that runs first in a write's transaction.
    public typealias Authorisation = @Sendable (any SQLExecutor) async throws -> Void

    /// Creates an endpoint; returns it and its secret (the only time the secret is shown).
    /// `authorise` runs first in the write's transaction (the caller's credential must still allow it).
    public func create(
        _ input: WebhookEndpointInput, actor: String, ip: String?, authorise: @escaping Authorisation = { _ in }, logger: Logger
    ) async throws -> (WebhookEndpoint, secret: String) {
        guard let url = input.url else { throw WebhookError.invalid("Field 'url' is required.") }
        guard let requested = input.events else { throw WebhookError.invalid("Field 'events' is required.") }
        try await check(url: url)
        let events = try Self.checked(events: requested, threshold: input.balanceLowThreshold ?? nil)
        let description = try Self.checked(description: input.description ?? nil)
        let secret = WebhookSigner.newSecret()
        let sealed = try box.seal(secret)
        let endpoint = try await database.transaction(logger: logger) { tx in
            try await authorise(tx)
            // Parallel creates count one at a time (SQLite's writer lock does this already). The creation time is read
            // after the wait: the endpoint takes the events from then on, and a time from before a long wait would
            // claim events that fan-out passes went through while it waited.
            if tx.engine == .postgres { try await tx.query("SELECT pg_advisory_xact_lock(hashtext('webhook_endpoints'))") }
            let now = clock.now()
            let count = try await tx.first("SELECT COUNT(*) AS n FROM webhook_endpoints WHERE deleted_at_ms IS NULL")?.optionalInt("n") ?? 0
            guard count < settings.endpointsMax else { throw WebhookError.invalid("At most \(settings.endpointsMax) endpoints; delete one first.") }
            let id = "whe_" + FreshID.hex()
            try await tx.query(
                """
                INSERT INTO webhook_endpoints (id, url, description, events, balance_low_threshold, secret_sealed, created_at_ms, updated_at_ms)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                """, [id, url, description, events.joined(separator: ","), input.balanceLowThreshold ?? nil, sealed, now, now])
            try await audit.record(tx, at: now, actor: actor, action: "webhook_created", subject: id, ip: ip, detail: events.joined(separator: ","))
            return try await load(tx, id: id, now: now)
        }
        return (endpoint, secret)
    }

    public func list(logger: Logger) async throws -> [WebhookEndpoint] {
        try await database.withConnection(logger: logger) { tx in
            let now = clock.now()
            return try await tx.query("SELECT * FROM webhook_endpoints WHERE deleted_at_ms IS NULL ORDER BY created_at_ms, id").map {
                try WebhookEndpoint(row: $0, now: now)
            }
        }
    }

    public func endpoint(id: String, logger: Logger) async throws -> WebhookEndpoint {
        try await database.withConnection(logger: logger) { try await load($0, id: id, now: clock.now()) }
    }

    /// Changes what the input names. `enabled: true` turns a disabled endpoint back on.
    public func update(
        id: String, _ input: WebhookEndpointInput, actor: String, ip: String?, authorise: @escaping Authorisation = { _ in }, logger: Logger
    ) async throws -> WebhookEndpoint {
        if let url = input.url { try await check(url: url) }
        let description = try input.description.map { try Self.checked(description: $0) }
        return try await database.transaction(logger: logger) { tx in
            try await authorise(tx)
            let now = clock.now()
            let current = try await load(tx, id: id, now: now)
            let threshold = input.balanceLowThreshold ?? current.balanceLowThreshold
            let events = try Self.checked(events: input.events ?? current.events, threshold: threshold)
            var disabled: (Date?, String?) = (current.disabledAt, current.disabledReason)
            if let enabled = input.enabled {
                disabled = enabled ? (nil, nil) : (current.disabledAt ?? now, current.disabledReason ?? "disabled by an operator")
            }
            try await tx.query(
                """
                UPDATE webhook_endpoints SET url = ?, description = ?, events = ?, balance_low_threshold = ?, disabled_at_ms = ?, disabled_reason = ?,
                    updated_at_ms = ? WHERE id = ?
                """,
                [
                    input.url ?? current.url, description ?? current.description, events.joined(separator: ","), threshold, disabled.0, disabled.1,
                    now,
                    id,
                ])
            try await audit.record(tx, at: now, actor: actor, action: "webhook_updated", subject: id, ip: ip, detail: nil)
            return try await load(tx, id: id, now: now)
        }
    }

    /// Deletes the endpoint; its pending deliveries fail. False when there was none.
    public func delete(id: String, actor: String, ip: String?, logger: Logger) async throws -> Bool {
        try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            let rows = try await tx.query(
                "UPDATE webhook_endpoints SET deleted_at_ms = ?, updated_at_ms = ? WHERE id = ? AND deleted_at_ms IS NULL RETURNING id",
                [now, now, id])
            guard !rows.isEmpty else { return false }
            try await tx.query(
                "UPDATE webhook_deliveries SET status = 'failed', last_error = 'endpoint deleted' WHERE endpoint_id = ? AND status = 'pending'", [id])
            try await audit.record(tx, at: now, actor: actor, action: "webhook_deleted", subject: id, ip: ip, detail: nil)
            return true
        }
    }

    /// A new secret; the previous one keeps signing beside it for ``WebhookSettings/rotationOverlapSeconds``.
    public func rotateSecret(
        id: String, actor: String, ip: String?, authorise: @escaping Authorisation = { _ in }, logger: Logger
    ) async throws -> (WebhookEndpoint, secret: String) {
        let secret = WebhookSigner.newSecret()
        let sealed = try box.seal(secret)
        let endpoint = try await database.transaction(logger: logger) { tx in
            try await authorise(tx)
            let now = clock.now()
            _ = try await load(tx, id: id, now: now)
            try await tx.query(
                """
                UPDATE webhook_endpoints SET previous_secret_sealed = secret_sealed, previous_secret_until_ms = ?, secret_sealed = ?, updated_at_ms = ?
                WHERE id = ?
                """, [now.addingTimeInterval(settings.rotationOverlapSeconds), sealed, now, id])
            try await audit.record(tx, at: now, actor: actor, action: "webhook_secret_rotated", subject: id, ip: ip, detail: nil)
            return try await load(tx, id: id, now: now)
        }
        return (endpoint, secret)
    }

    func load(_ tx: any SQLExecutor, id: String, now: Date) async throws -> WebhookEndpoint {
        guard let row = try await tx.first("SELECT * FROM webhook_endpoints WHERE id = ? AND deleted_at_ms IS NULL", [id]) else {
            throw WebhookError.notFound
        }
        return try WebhookEndpoint(row: row, now: now)
    }

    func check(url: String) async throws {
        if let problem = settings.urlPolicy.formProblem(url) { throw WebhookError.invalid(problem) }
        if let problem = await settings.urlPolicy.addressProblem(url) { throw WebhookError.invalid(problem) }
    }

    static func checked(events: [String], threshold: Int64?) throws -> [String] {
        let known = WebhookEventType.subscribable
        guard !events.isEmpty, events.count <= known.count else {
            throw WebhookError.invalid("Field 'events' must list 1 to \(known.count) of: \(known.joined(separator: ", ")).")
        }
        for (index, event) in events.enumerated() where !known.contains(event) {
            throw WebhookError.invalid("Field 'events[\(index)]' must be one of \(known.joined(separator: ", ")) (got '\(event.prefix(40))').")
        }
        if events.contains(WebhookEventType.balanceLow.rawValue) && threshold == nil {
            throw WebhookError.invalid("Field 'balanceLowThreshold' is required to subscribe to balance.low.")
        }
        if let threshold, !(1...thresholdMax).contains(threshold) {
            throw WebhookError.invalid("Field 'balanceLowThreshold' must be a whole number from 1 to \(thresholdMax).")
        }
        var seen = Set<String>()
        return events.filter { seen.insert($0).inserted }
    }

    static func checked(description: String?) throws -> String? {
        guard let description else { return nil }
        guard description.utf8.count <= descriptionBytesMax else {
            throw WebhookError.invalid("Field 'description' must be at most \(descriptionBytesMax) bytes.")
        }
        return description.isEmpty ? nil : description
    }
}
