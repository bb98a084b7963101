import Entitlements
import Foundation
import Ledger
import Logging
import Metrics
import SafeJSON
import Storage

/// The billing endpoints' work, each a whole request: verify, apply in one transaction, record what a verified event was
/// refused for. A payload that fails verification is not stored (anyone can send one): it is counted as
/// `billing_events{outcome="unverified"}` and refused. A verified event that is refused is stored as `rejected` in a
/// transaction of its own, with the reason.
extension BillingService {
    /// `POST /api/iap/apple/verify`: the signed-in user's purchase (a profile that may make purchases) takes effect at once.
    /// `authorise` runs first in the transaction (the session still holds, Auth's `AuthService.stillLive`): a purchase
    /// verified by a session revoked meanwhile, or for an account erased meanwhile, is bound to nothing.
    public func verifyApplePurchase(
        _ jws: String, userID: String, canMakePurchases: Bool, authorise: @escaping @Sendable (any SQLExecutor) async throws -> Void, logger: Logger
    ) async throws
        -> (transaction: AppleTransaction, environment: AppleEnvironment, verdict: BillingVerdict)
    {
        guard canMakePurchases else { throw EntitlementError.purchaseNotAllowed }
        _ = try requireApple()
        let (transaction, environment) = try await verified(provider: "apple", logger: logger) { try await verifyAppleTransaction(jws) }
        let verdict = try await recordingRefusal(provider: "apple", source: "verify", raw: jws, logger: logger) {
            // In the user's lane, as every write that takes their ledger locks; the purchase's binding lock before the
            // session's row lock, in the order Apple's notification for the same purchase takes them.
            try await database.transaction(lane: Ledger.lane(userID: userID), logger: logger) { tx in
                try await lockBinding(tx, provider: "apple", externalID: transaction.originalTransactionId)
                try await authorise(tx)
                return try await applyVerifiedPurchase(tx, userID: userID, transaction: transaction, environment: environment, raw: jws)
            }
        }
        BillingMetrics.event(provider: "apple", outcome: verdict.outcome.rawValue)
        logger.info("apple purchase verified", metadata: ["outcome": "\(verdict.outcome.rawValue)", "environment": "\(environment.rawValue)"])
        return (transaction, environment, verdict)
    }

    /// `POST /api/webhooks/apple`: the raw body `{"signedPayload": "<JWS>"}`.
    public func receiveAppleNotification(raw: String, logger: Logger) async throws -> BillingVerdict {
        _ = try requireApple()
        let notification = try await verified(provider: "apple", logger: logger) {
            guard let body = try? UntrustedJSON.decode(AppleNotificationBody.self, from: Data(raw.utf8)) else {
                throw BillingError.malformed("The body must be {\"signedPayload\": \"<JWS>\"}.")
            }
            return try await verifyAppleNotification(body.signedPayload)
        }
        let verdict = try await database.transaction(logger: logger) { tx in try await handleAppleNotification(tx, notification, raw: raw) }
        BillingMetrics.event(provider: "apple", outcome: verdict.outcome.rawValue)
        logger.info("apple notification", metadata: ["type": "\(notification.notificationType)", "outcome": "\(verdict.outcome.rawValue)"])
        return verdict
    }

    /// `POST /api/webhooks/stripe`: the raw body bytes and the `Stripe-Signature` header.
    public func receiveStripeEvent(rawBody: [UInt8], signature: String?, logger: Logger) async throws -> BillingVerdict {
        _ = try requireStripe()
        try await verified(provider: "stripe", logger: logger) { try verifyStripe(rawBody: rawBody, header: signature) }
        let raw = String(decoding: rawBody, as: UTF8.self)
        let verdict = try await recordingRefusal(provider: "stripe", source: "webhook", raw: raw, logger: logger) {
            try await database.transaction(logger: logger) { tx in try await handleStripeEvent(tx, raw: raw) }
        }
        BillingMetrics.event(provider: "stripe", outcome: verdict.outcome.rawValue)
        logger.info("stripe event", metadata: ["outcome": "\(verdict.outcome.rawValue)"])
        return verdict
    }

    /// Operators: received events, newest first (`before`: the cursor of the previous page).
    public func events(userID: String?, provider: String?, limit: Int, before: BillingCursor?, logger: Logger) async throws -> [BillingEvent] {
        try await database.withConnection(logger: logger) { tx in
            try await events(tx, userID: userID, provider: provider, limit: limit, before: before)
        }
    }

    /// Runs a signature or payload verification; a failure is counted and logged without the body, never stored.
    func verified<T>(provider: String, logger: Logger, _ verify: () async throws -> T) async throws -> T {
        do {
            return try await verify()
        } catch let error as BillingError {
            if case .notConfigured = error { throw error }
            BillingMetrics.event(provider: provider, outcome: "unverified")
            logger.notice("billing payload failed verification", metadata: ["provider": "\(provider)", "reason": "\(error.detail)"])
            throw error
        }
    }

    /// Applies a verified event that can still be refused; a refusal is stored (raw, with the reason) and rethrown.
    func recordingRefusal<T>(provider: String, source: String, raw: String, logger: Logger, _ apply: () async throws -> T) async throws -> T {
        do {
            return try await apply()
        } catch let error as BillingError {
            try await recordRejected(database, provider: provider, source: source, raw: raw, detail: error.detail, logger: logger)
            BillingMetrics.event(provider: provider, outcome: BillingOutcome.rejected.rawValue)
            logger.notice("billing event refused", metadata: ["provider": "\(provider)", "reason": "\(error.detail)"])
            throw error
        }
    }
}

/// `billing_events{provider,outcome}`.
enum BillingMetrics {
    static func event(provider: String, outcome: String) {
        Counter(label: "billing_events", dimensions: [("provider", provider), ("outcome", outcome)]).increment()
    }
}

extension BillingError {
    /// What went wrong, for the sender (the HTTP problem's detail) and the stored record.
    public var detail: String {
        switch self {
        case .notConfigured(let detail), .malformed(let detail): detail
        case .apple(let error): error.detail
        case .stripe(let error): error.detail
        case .accountTokenMismatch: "The transaction's appAccountToken names another account than the signed-in one."
        case .boundToAnotherAccount: "This purchase already belongs to another account; it is never moved silently. Contact support."
        case .unknownProduct(let id): "productId '\(id)' is not a plan or token pack in the catalog."
        case .transactionRevoked: "The transaction was refunded or revoked; it grants nothing."
        case .offerNotEligible(let reason): "Not eligible: \(reason)."
        }
    }
}
