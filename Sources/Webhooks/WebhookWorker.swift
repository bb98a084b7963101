import Clock
import Events
import Foundation
import Logging
import Metrics
import Secrets
import Storage
import Traces

/// Delivers the outbox. Each pass (on every node; the database arbitrates):
/// 1. **Fan-out**: outbox events become one delivery per subscribed, enabled endpoint created before the event (unique
///    per endpoint and event), plus `balance.low` where a change crossed an endpoint's threshold downwards. The events
///    are read and their deliveries rendered without a lock; then an event leaves the outbox in the same write that
///    inserts its deliveries (one statement on PostgreSQL, which skips events another node is claiming).
/// 2. **Claim**: due deliveries are leased (`locked_until`, the attempt number raised) so each runs on one node at a time;
///    a node killed mid-try leaves a lease that lapses, and the delivery is tried again (at least once, same `webhook-id`).
/// 3. **Send** (at most ``WebhookSettings/maxInFlight`` at once) and **record** every try; 2xx delivers, 5xx, 408, 429,
///    timeouts and connection errors retry with exponential backoff and jitter within the retry window, 410 disables the
///    endpoint, other answers fail the delivery (an operator may retry it).
public struct WebhookWorker: Sendable {
    let database: any Database
    let box: SecretBox
    let clock: any TimeSource
    let settings: WebhookSettings
    let sender: any WebhookSender
    let logger: Logger

    public init(database: any Database, box: SecretBox, clock: any TimeSource, settings: WebhookSettings, sender: any WebhookSender, logger: Logger) {
        self.database = database
        self.box = box
        self.clock = clock
        self.settings = settings
        self.sender = sender
        self.logger = logger
    }

    /// Runs until cancelled or `keepGoing` turns false: fan-out and delivery in two loops of their own (slow receivers
    /// never hold up fan-out), each going again at once while there is work, else after ``WebhookSettings/pollSeconds``.
    /// Stopping by `keepGoing` (a graceful shutdown) lets the pass in progress finish and record its tries, so no
    /// delivery stays leased to a node that is gone; cancelling cuts tries short (their leases lapse, then they retry).
    public func run(keepGoing: @escaping @Sendable () -> Bool = { true }) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await fanOutPasses(keepGoing: keepGoing) }
            group.addTask {
                var passes = 0
                var purgedTo: Int64 = 0
                await loop("delivery", keepGoing) {
                    passes += 1
                    if passes % Self.passesPerPurge == 0 {
                        let from = passes % (Self.passesPerPurge * Self.purgesPerRestart) == 0 ? 0 : purgedTo
                        purgedTo = try await purge(from: from).reached
                    }
                    return try await Traces.span("job.webhook_delivery") { try await deliverOnce() } >= settings.maxInFlight
                }
            }
        }
    }

    func loop(_ name: String, _ keepGoing: @Sendable () -> Bool, _ pass: () async throws -> Bool) async {
        while !Task.isCancelled && keepGoing() {
            var busy = false
            do { busy = try await pass() } catch is CancellationError { return } catch {
                logger.warning("webhook \(name) pass failed", metadata: ["error": .error(error)])
            }
            // Idle: wait a poll interval, looking up every 100 ms for a stop.
            if !busy {
                for _ in 0..<max(1, Int(settings.pollSeconds * 10)) where keepGoing() {
                    try? await Task.sleep(for: .seconds(min(0.1, settings.pollSeconds)))
                }
            }
        }
    }

    /// One pass: fan-out, then one batch of tries. Returns how many events were dispatched and tries made.
    @discardableResult
    public func runOnce() async throws -> (dispatched: Int, sent: Int) {
        let dispatched = try await fanOut(limit: Self.fanOutBatch)
        return (dispatched, try await deliverOnce())
    }

    /// Claims up to `maxInFlight` due deliveries, tries them all at once, and records the tries; returns how many.
    func deliverOnce() async throws -> Int {
        let claimed = try await claim(limit: settings.maxInFlight)
        // Each endpoint's addresses are checked once a pass (DNS may have changed since the endpoint was saved).
        var refused: [String: String?] = [:]
        for url in Set(claimed.map(\.url)) { refused[url] = await settings.urlPolicy.addressProblem(url) }
        let problems = refused
        let tries = await withTaskGroup(of: Try.self) { group in
            for delivery in claimed { group.addTask { await attempt(delivery, refused: problems[delivery.url] ?? nil) } }
            return await group.reduce(into: [Try]()) { $0.append($1) }
        }
        do {
            try await record(tries)
        } catch {
            logger.warning("webhook tries not recorded", metadata: ["count": "\(tries.count)", "error": .error(error)])
        }
        return claimed.count
    }

    /// Forgets finished deliveries (with their tries) after ``deliveryRetentionDays`` days, oldest first, in batches of
    /// `batch`, at most `batches` of them per call, each one statement on PostgreSQL (one short transaction on SQLite).
    /// Reads from `from` (a creation time in milliseconds, the `reached` of an earlier call) instead of from the oldest:
    /// each batch leaves its rows as dead index entries until vacuum, and reading from the oldest walked them all again
    /// on every batch of a 30-day backlog. Returns how many deliveries went and the creation time reached. A batch is
    /// 100 deliveries: 500 took 25 ms alone but 244–488 ms beside a million-event fan-out on two cores, the longest
    /// transaction of that job (`scripts/bench-scale`).
    @discardableResult
    public func purge(batch: Int = 100, batches: Int = 100, from: Int64 = 0) async throws -> (purged: Int, reached: Int64) {
        let cutoff = clock.now().addingTimeInterval(-Double(Self.deliveryRetentionDays) * 86400)
        var purged = 0
        var reached = from
        for _ in 0..<batches {
            let binds: [any SQLBindable] = [reached, cutoff, batch]
            let gone: [SQLRow]
            if database.engine == .postgres {
                gone = try await database.withConnection(logger: logger) {
                    try await $0.query(
                        """
                        WITH gone AS (DELETE FROM webhook_deliveries WHERE id IN (\(Self.oldestFinished("id"))) AND \(Self.finished) RETURNING id, created_at_ms),
                          tries AS (DELETE FROM webhook_attempts WHERE delivery_id IN (SELECT id FROM gone))
                        SELECT created_at_ms FROM gone
                        """, binds)
                }
            } else {
                gone = try await database.transaction(logger: logger) { tx in
                    let rows = try await tx.query(Self.oldestFinished("id, created_at_ms"), binds)
                    let ids = try rows.map { try $0.string("id") }
                    guard !ids.isEmpty else { return [] }
                    let list = Array(repeating: "?", count: ids.count).joined(separator: ", ")
                    let deleted = try await tx.query(
                        "DELETE FROM webhook_deliveries WHERE id IN (\(list)) AND \(Self.finished) RETURNING id, created_at_ms", ids)
                    let deletedIDs = try deleted.map { try $0.string("id") }
                    guard !deletedIDs.isEmpty else { return [] }
                    let deletedList = Array(repeating: "?", count: deletedIDs.count).joined(separator: ", ")
                    try await tx.query("DELETE FROM webhook_attempts WHERE delivery_id IN (\(deletedList))", deletedIDs)
                    return deleted
                }
            }
            purged += gone.count
            reached = max(reached, gone.compactMap { $0.optionalInt("created_at_ms") }.max() ?? reached)
            if gone.count < batch { break }
        }
        return (purged, reached)
    }

    /// Delivery passes between purges, and purges between starts from the oldest delivery (a delivery still pending when
    /// a purge went past it is forgotten on the next start).
    static let passesPerPurge = 60
    static let purgesPerRestart = 10

    /// Binds: from, cutoff, limit.
    static func oldestFinished(_ columns: String) -> String {
        "SELECT \(columns) FROM webhook_deliveries WHERE created_at_ms >= ? AND created_at_ms < ? AND \(finished) ORDER BY created_at_ms LIMIT ?"
    }

    /// A delivery the purge may forget. The deleting statement checks it again on the row it deletes: an operator's retry
    /// that made the delivery pending after the purge's read (PostgreSQL re-reads only the deleted row then, not the
    /// subquery that found it) keeps its delivery.
    static let finished = "status <> 'pending'"

    public static let deliveryRetentionDays = 30
}
