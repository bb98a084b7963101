import AppStoreServer
import Clock
import Entitlements
import Events
import Foundation
import Ledger
import Logging
import Storage

/// How this service answers Apple's CONSUMPTION_REQUEST (configurable: `APPLE_SAMPLE_CONTENT_PROVIDED`,
/// `APPLE_REFUND_PREFERENCE`).
public struct AppleConsumptionPolicy: Sendable {
    public enum Preference: String, Sendable {
        /// Nothing consumed → GRANT_FULL; all of it → DECLINE; part → GRANT_PRORATED; a subscription → no preference.
        case byConsumption = "consumption"
        /// Never state a preference.
        case none
    }
    /// Whether the app gives a sample before purchase (the welcome tokens are one).
    public var sampleContentProvided = true
    public var preference = Preference.byConsumption
    /// Apple's window to answer.
    public var windowSeconds: Double = 12 * 3600

    public init() {}

    /// The refund preference for a purchase consumed `milliunits` of 100,000 (nil: not a consumable).
    public func refundPreference(consumed milliunits: Int?) -> String? {
        guard preference == .byConsumption, let milliunits else { return nil }
        if milliunits <= 0 { return "GRANT_FULL" }
        if milliunits >= 100_000 { return "DECLINE" }
        return "GRANT_PRORATED"
    }
}

/// A token-pack purchase and how much of it was spent, attributing spends to purchases oldest first: the purchased
/// tokens an account still has (its bucket and what pending holds reserved from it) are its newest purchases' rest.
public struct PurchaseConsumption: Sendable, Equatable {
    public let tokens: Int64
    public let consumed: Int64
    /// Milliunits (0–100,000), as Apple takes `consumptionPercentage`.
    public var milliunits: Int { Int(Share.of(consumed, in: tokens)) }

    /// `purchases`: the account's token-pack purchases oldest first (tokens net of what refunds took back);
    /// `unspent`: its purchased tokens still there. Returns each purchase's consumption, in order.
    public static func attribute(_ purchases: [Int64], unspent: Int64) -> [PurchaseConsumption] {
        let total = purchases.reduce(0, +)
        var lost = max(0, total - max(0, unspent))
        return purchases.map { tokens in
            let consumed = min(max(lost, 0), tokens)
            lost -= consumed
            return PurchaseConsumption(tokens: tokens, consumed: consumed)
        }
    }
}

extension BillingService {
    // MARK: - Consent

    /// Whether the user agreed to share consumption data with Apple when they ask for a refund (default: no).
    public func appleConsumptionConsent(userID: String, logger: Logger) async throws -> Bool {
        try await database.withConnection(logger: logger) { tx in
            try await tx.first("SELECT apple_consumption_data FROM billing_consents WHERE user_id = ?", [userID])?.bool("apple_consumption_data")
                ?? false
        }
    }

    public func setAppleConsumptionConsent(userID: String, _ consented: Bool, ip: String?, logger: Logger) async throws {
        try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            try await tx.query(
                """
                INSERT INTO billing_consents (user_id, apple_consumption_data, updated_at_ms) VALUES (?, ?, ?)
                ON CONFLICT (user_id) DO UPDATE SET apple_consumption_data = excluded.apple_consumption_data, updated_at_ms = excluded.updated_at_ms
                """, [userID, consented, now])
            try await machine.audit.record(
                tx, at: now, actor: userID, action: consented ? "apple_consumption_consent_given" : "apple_consumption_consent_withdrawn",
                subject: userID, ip: ip, detail: nil)
        }
    }

    // MARK: - CONSUMPTION_REQUEST

    /// Queues Apple's request (in the notification's transaction); the worker answers it. Once per transaction.
    func queueConsumptionRequest(
        _ tx: any SQLExecutor, userID: String, transactionID: String, notificationUUID: String
    ) async throws -> BillingVerdict {
        let now = clock.now()
        let inserted = try await tx.query(
            """
            INSERT INTO apple_consumption_requests (transaction_id, user_id, notification_uuid, received_at_ms, deadline_at_ms, status, next_try_at_ms)
            VALUES (?, ?, ?, ?, ?, 'pending', ?) ON CONFLICT (transaction_id) DO NOTHING RETURNING transaction_id
            """, [transactionID, userID, notificationUUID, now, now.addingTimeInterval(consumptionPolicy.windowSeconds), now])
        return .acknowledged(inserted.isEmpty ? "consumption request already queued" : "consumption information queued for Apple", user: userID)
    }

    /// What to tell Apple about one purchase, from the ledger now; nil when the user has not consented (Apple refuses an
    /// answer without consent, so none is sent).
    public func consumptionInformation(_ tx: any SQLExecutor, userID: String, transactionID: String) async throws -> ConsumptionInformation? {
        guard
            try await tx.first("SELECT apple_consumption_data FROM billing_consents WHERE user_id = ?", [userID])?.bool("apple_consumption_data")
                == true
        else { return nil }
        let grant = try await tx.first("SELECT kind FROM billing_grants WHERE provider = 'apple' AND source_id = ?", [transactionID])
        var milliunits: Int?
        if try grant?.string("kind") == "tokens" {
            let purchases = try await tx.query(
                "SELECT source_id, tokens, clawed_tokens FROM billing_grants WHERE user_id = ? AND kind = 'tokens' ORDER BY created_at_ms, source_id",
                [userID])
            let nets = try purchases.map { try $0.int("tokens") - $0.int("clawed_tokens") }
            let attributed = PurchaseConsumption.attribute(nets, unspent: try await ledger.purchasedUnspent(tx, userID: userID))
            if let index = try purchases.firstIndex(where: { try $0.string("source_id") == transactionID }) {
                milliunits = PurchaseConsumption(tokens: try purchases[index].int("tokens"), consumed: attributed[index].consumed).milliunits
            }
        }
        return ConsumptionInformation(
            customerConsented: true, sampleContentProvided: consumptionPolicy.sampleContentProvided,
            deliveryStatus: grant == nil ? "UNDELIVERED_OTHER" : "DELIVERED", consumptionPercentage: milliunits,
            refundPreference: consumptionPolicy.refundPreference(consumed: milliunits))
    }

    /// The worker's pass: claims due requests (pushing their next try a minute on, so two nodes never send one twice at
    /// once), answers each, and records what happened. Past Apple's window a request is given up.
    public func answerConsumptionRequests(client: AppStoreServerClient, limit: Int, logger: Logger) async throws -> Int {
        let claimed: [(id: String, user: String, deadline: Date)] = try await database.transaction(logger: logger) { tx in
            let now = clock.now()
            return try await tx.query(
                """
                UPDATE apple_consumption_requests SET attempts = attempts + 1, next_try_at_ms = ?
                WHERE transaction_id IN (SELECT transaction_id FROM apple_consumption_requests WHERE status = 'pending' AND next_try_at_ms <= ?
                    ORDER BY next_try_at_ms LIMIT ?) AND status = 'pending' AND next_try_at_ms <= ?
                RETURNING transaction_id, user_id, deadline_at_ms
                """, [now.addingTimeInterval(60), now, limit, now]
            ).map { (try $0.string("transaction_id"), try $0.string("user_id"), try $0.date("deadline_at_ms")) }
        }
        for request in claimed {
            let (status, detail, answer) = await answer(request.id, user: request.user, deadline: request.deadline, client: client, logger: logger)
            try await database.transaction(logger: logger) { tx in
                let now = clock.now()
                try await tx.query(
                    "UPDATE apple_consumption_requests SET status = ?, detail = ?, answer = ?, resolved_at_ms = ? WHERE transaction_id = ?",
                    [status, detail, answer, status == "pending" ? nil : now, request.id])
                if status != "pending" {
                    try await machine.audit.record(
                        tx, at: now, actor: "system", action: "apple_consumption_\(status)", subject: request.user, ip: nil, detail: detail)
                }
            }
        }
        return claimed.count
    }

    func answer(
        _ transactionID: String, user: String, deadline: Date, client: AppStoreServerClient, logger: Logger
    ) async -> (String, String, String?) {
        do {
            let information = try await database.transaction(logger: logger) { tx in
                try await consumptionInformation(tx, userID: user, transactionID: transactionID)
            }
            guard let information else { return ("skipped", "the customer has not consented to share consumption data", nil) }
            let json = String(decoding: try JSONEncoder().encode(information), as: UTF8.self)
            try await client.sendConsumption(transactionID, information, logger: logger)
            return ("sent", "Apple accepted the consumption information", json)
        } catch let error as AppStoreServerError {
            if case .refused = error { return ("failed", error.detail, nil) }
            return clock.now() >= deadline ? ("failed", "past Apple's window: \(error.detail)", nil) : ("pending", error.detail, nil)
        } catch {
            // Stored and audited: a fixed phrase, never an error's own text (a database error's says nothing, or too much).
            logger.warning("consumption information not sent", metadata: ["transaction": "\(transactionID)", "error": .error(error)])
            let detail = "the consumption information could not be read or encoded"
            return clock.now() >= deadline ? ("failed", "past Apple's window: \(detail)", nil) : ("pending", detail + "; retrying", nil)
        }
    }
}
