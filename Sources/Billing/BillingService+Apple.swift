import Clock
import Entitlements
import Foundation
import Ledger
import Logging
import SafeJSON
import Storage

extension BillingService {
    public func requireApple() throws(BillingError) -> AppleSignedDataVerifier {
        guard let apple else {
            throw .notConfigured("Apple billing is not configured (APPLE_ROOT_CERTIFICATES, APPLE_BUNDLE_ID, APPLE_ENVIRONMENT).")
        }
        return apple
    }

    /// Verifies a device-posted StoreKit 2 transaction (before any transaction opens).
    public func verifyAppleTransaction(_ jws: String) async throws(BillingError) -> (AppleTransaction, AppleEnvironment) {
        let apple = try requireApple()
        do { return try await apple.verifyTransaction(jws) } catch { throw .apple(error) }
    }

    /// Verifies a notification's `signedPayload` and its nested JWSs.
    public func verifyAppleNotification(_ jws: String) async throws(BillingError) -> AppleNotification {
        let apple = try requireApple()
        do { return try await apple.verifyNotification(jws) } catch { throw .apple(error) }
    }

    /// `POST /api/iap/apple/verify`: the signed-in user's purchase takes effect at once. Idempotent per transaction id;
    /// the purchase is bound to this account (bound elsewhere → 409); notifications that arrived before the
    /// account was known are applied now, oldest first.
    public func applyVerifiedPurchase(
        _ tx: any SQLExecutor, userID: String, transaction: AppleTransaction, environment: AppleEnvironment, raw: String
    ) async throws -> BillingVerdict {
        // A family member's transaction may carry the purchaser's appAccountToken: it is bound to the member who verifies it.
        if let token = transaction.appAccountToken, !transaction.isFamilyShared, token.lowercased() != userID.lowercased() {
            throw BillingError.accountTokenMismatch
        }
        guard transaction.revocationDate == nil else { throw BillingError.transactionRevoked }
        guard
            catalog.plans.contains(where: { $0.appleProductId == transaction.productId })
                || catalog.tokenPacks.contains(where: { $0.appleProductId == transaction.productId })
        else { throw BillingError.unknownProduct(transaction.productId) }
        let newBinding = try await bind(
            tx, provider: "apple", externalID: transaction.originalTransactionId, userID: userID, environment: environment.rawValue)
        // One record per account and transaction: the app may post the same transaction again and again (a restore, a
        // retry), and each copy stored its JWS (kilobytes) for good.
        let eventID = try await claim(
            tx, provider: "apple", source: "verify", dedupeKey: "apple-verify:\(userID):\(transaction.transactionId)",
            externalID: transaction.transactionId, eventType: "VERIFY", originalID: transaction.originalTransactionId,
            environment: environment.rawValue, signedAt: transaction.signedDate.map(Date.init(epochMilliseconds:)), raw: raw,
            recordDuplicate: false)
        if newBinding { try await replayUnmatchedApple(tx, originalTransactionID: transaction.originalTransactionId) }
        let at = Date(epochMilliseconds: transaction.signedDate ?? clock.now().epochMilliseconds)
        let verdict = try await applyAppleTransaction(tx, userID: userID, transaction: transaction, at: at)
        if let eventID { try await settle(tx, eventID: eventID, verdict) }
        return verdict
    }

    /// `POST /api/webhooks/apple` after verification: stored once per notificationUUID, applied in the same transaction.
    public func handleAppleNotification(_ tx: any SQLExecutor, _ notification: AppleNotification, raw: String) async throws -> BillingVerdict {
        guard
            let eventID = try await claim(
                tx, provider: "apple", source: "notification", dedupeKey: "apple:\(notification.notificationUUID)",
                externalID: notification.notificationUUID, eventType: Self.typeName(notification),
                originalID: notification.transaction?.originalTransactionId,
                environment: notification.environment.rawValue, signedAt: Date(epochMilliseconds: notification.signedDate), raw: raw)
        else { return BillingVerdict(outcome: .duplicate, detail: "already received; no effect", userID: nil) }
        let verdict = try await applyAppleNotification(tx, notification)
        try await settle(tx, eventID: eventID, verdict)
        return verdict
    }

    static func typeName(_ notification: AppleNotification) -> String {
        notification.subtype.map { "\(notification.notificationType)/\($0)" } ?? notification.notificationType
    }

    enum AppleOwner { case user(String), unmatched, conflict(String) }

    /// The account a transaction belongs to: its appAccountToken (an existing user), else the account its
    /// originalTransactionId was bound to. A token naming another account than the binding is a conflict.
    func appleOwner(_ tx: any SQLExecutor, _ transaction: AppleTransaction, environment: AppleEnvironment) async throws -> AppleOwner {
        let bound = try await boundUser(tx, provider: "apple", externalID: transaction.originalTransactionId)
        // A family member's transaction names no account of its own (its token, if any, is the purchaser's): only the
        // member's verify binds it, so a member's REVOKE never reaches the purchaser.
        if !transaction.isFamilyShared, let token = try await existingUser(tx, transaction.appAccountToken) {
            if let bound, bound != token { return .conflict("appAccountToken names another account than the one this purchase is bound to") }
            if bound == nil {
                _ = try await bind(
                    tx, provider: "apple", externalID: transaction.originalTransactionId, userID: token, environment: environment.rawValue)
            }
            return .user(token)
        }
        return bound.map(AppleOwner.user) ?? .unmatched
    }

    func applyAppleNotification(_ tx: any SQLExecutor, _ notification: AppleNotification) async throws -> BillingVerdict {
        let type = notification.notificationType
        if type == "TEST" { return .acknowledged("test notification") }
        guard let transaction = notification.transaction else { return .acknowledged("\(type): no transaction to apply") }
        let userID: String
        switch try await appleOwner(tx, transaction, environment: notification.environment) {
        case .user(let id): userID = id
        case .unmatched:
            return BillingVerdict(
                outcome: .unmatched, detail: "no account for originalTransactionId yet; applied when the purchase is verified", userID: nil)
        case .conflict(let why): return BillingVerdict(outcome: .conflict, detail: why, userID: nil)
        }
        let at = Date(epochMilliseconds: notification.signedDate)
        let eventID = "notification:\(notification.notificationUUID)"
        let renewal = notification.renewalInfo
        if let verdict = try await anotherChain(tx, userID: userID, type: type, subtype: notification.subtype, transaction: transaction) {
            return verdict
        }
        switch type {
        case "SUBSCRIBED", "DID_RENEW", "OFFER_REDEEMED", "ONE_TIME_CHARGE", "RENEWAL_EXTENDED":
            return try await applyAppleTransaction(tx, userID: userID, transaction: transaction, at: at)
        case "DID_CHANGE_RENEWAL_PREF":
            if notification.subtype == "UPGRADE" { return try await applyAppleTransaction(tx, userID: userID, transaction: transaction, at: at) }
            let next = renewal?.autoRenewProductId ?? transaction.productId
            guard let plan = catalog.plans.first(where: { $0.appleProductId == next }) else {
                return BillingVerdict(outcome: .ignored, detail: "unknown autoRenewProductId \(next)", userID: userID)
            }
            return try await applyMachine(tx, provider: .apple, eventID: eventID, userID: userID, at: at, .changePlanAtRenewal(planID: plan.id))
        case "DID_CHANGE_RENEWAL_STATUS":
            let on = notification.subtype == "AUTO_RENEW_ENABLED" || (notification.subtype == nil && renewal?.autoRenewStatus == 1)
            return try await applyMachine(tx, provider: .apple, eventID: eventID, userID: userID, at: at, .setWillRenew(on))
        case "DID_FAIL_TO_RENEW":
            if notification.subtype == "GRACE_PERIOD", let until = renewal?.gracePeriodExpiresDate {
                return try await applyMachine(
                    tx, provider: .apple, eventID: eventID, userID: userID, at: at, .grace(until: Date(epochMilliseconds: until)))
            }
            return try await applyMachine(tx, provider: .apple, eventID: eventID, userID: userID, at: at, .pastDue)
        case "GRACE_PERIOD_EXPIRED":
            return try await applyMachine(tx, provider: .apple, eventID: eventID, userID: userID, at: at, .pastDue)
        case "EXPIRED":
            return try await applyMachine(tx, provider: .apple, eventID: eventID, userID: userID, at: at, .expire)
        case "REFUND", "REVOKE":
            let share = transaction.revocationPercentage.map(Int64.init) ?? Share.all
            if let verdict = try await clawPack(tx, provider: "apple", sourceID: transaction.transactionId, share: share) { return verdict }
            if let pack = catalog.tokenPacks.first(where: { $0.appleProductId == transaction.productId }), !transaction.isFamilyShared {
                return try await recordRefundBeforeGrant(
                    tx, provider: "apple", sourceID: transaction.transactionId, userID: userID, pack: pack, quantity: transaction.quantity ?? 1,
                    share: share)
            }
            guard catalog.plans.contains(where: { $0.appleProductId == transaction.productId }) else {
                return BillingVerdict(outcome: .ignored, detail: "no grant recorded for transaction \(transaction.transactionId)", userID: userID)
            }
            return try await applyMachine(
                tx, provider: .apple, eventID: "refund:\(transaction.transactionId)", userID: userID, at: at,
                .refund(periodKey: transaction.periodKey))
        case "CONSUMPTION_REQUEST":
            return try await queueConsumptionRequest(
                tx, userID: userID, transactionID: transaction.transactionId, notificationUUID: notification.notificationUUID)
        case "REFUND_REVERSED":
            if let verdict = try await restorePack(tx, provider: "apple", sourceID: transaction.transactionId) { return verdict }
            guard catalog.plans.contains(where: { $0.appleProductId == transaction.productId }) else {
                return BillingVerdict(outcome: .ignored, detail: "no grant recorded for transaction \(transaction.transactionId)", userID: userID)
            }
            return try await applyMachine(
                tx, provider: .apple, eventID: "refund_reversed:\(transaction.transactionId)", userID: userID, at: at,
                .reverseRefund(periodKey: transaction.periodKey, periodEnd: transaction.expiresDate.map(Date.init(epochMilliseconds:))))
        default:
            return .acknowledged("\(type) is stored, no effect", user: userID)
        }
    }

    /// What a transaction buys: a plan period (start, renewal or immediate change) or a token pack. Keyed by the
    /// transaction id, so the device's verify and Apple's notification for one purchase take effect once.
    func applyAppleTransaction(_ tx: any SQLExecutor, userID: String, transaction: AppleTransaction, at: Date) async throws -> BillingVerdict {
        if transaction.revocationDate != nil { return BillingVerdict(outcome: .ignored, detail: "the transaction is revoked", userID: userID) }
        if let pack = catalog.tokenPacks.first(where: { $0.appleProductId == transaction.productId }) {
            // Consumables are never shared by Apple; a shared one would multiply tokens by the family's size.
            if transaction.isFamilyShared {
                return BillingVerdict(outcome: .ignored, detail: "a family-shared transaction grants no token pack", userID: userID)
            }
            return try await grantPack(
                tx, provider: "apple", sourceID: transaction.transactionId, userID: userID, pack: pack, quantity: transaction.quantity ?? 1,
                paymentRef: nil)
        }
        guard let plan = catalog.plans.first(where: { $0.appleProductId == transaction.productId }) else {
            return BillingVerdict(outcome: .ignored, detail: "unknown productId \(transaction.productId)", userID: userID)
        }
        if let verdict = try await otherSubscription(tx, userID: userID, transaction: transaction) { return verdict }
        let start = Date(epochMilliseconds: transaction.purchaseDate)
        let end = transaction.expiresDate.map(Date.init(epochMilliseconds:))
        let trial = transaction.offerType == 1 && (transaction.price ?? 0) == 0
        let event = try await periodEvent(
            tx, userID: userID, plan: plan, provider: .apple, providerSubscriptionID: transaction.originalTransactionId, start: start, end: end,
            trial: trial)
        let verdict = try await applyMachine(
            tx, provider: .apple, eventID: "txn:\(transaction.transactionId)", userID: userID, at: at, event,
            providerSubscriptionID: transaction.originalTransactionId, familyShared: transaction.isFamilyShared)
        if verdict.outcome == .applied || verdict.outcome == .stale {
            try await recordPeriod(
                tx, provider: "apple", sourceID: transaction.transactionId, userID: userID, planID: plan.id, paymentRef: nil, start: start)
        }
        return verdict
    }

    /// For a family-shared transaction: nil when it may change the member's subscription, else why not. A subscription of
    /// the member's own (another purchase, live) outranks what the family shares; a refund or revocation of the shared
    /// access touches only the subscription that came from it.
    func otherSubscription(_ tx: any SQLExecutor, userID: String, transaction: AppleTransaction) async throws -> BillingVerdict? {
        guard transaction.isFamilyShared, let current = try await machine.lockedSubscription(userID: userID, tx),
            current.providerSubscriptionID != transaction.originalTransactionId, current.isEntitled(at: clock.now())
        else { return nil }
        return BillingVerdict(
            outcome: .ignored, detail: "family-shared access not applied: the account has a subscription of its own", userID: userID)
    }

    /// Notification types that start or change a paid period (a new purchase of the chain may replace the subscription).
    static let periodTypes: Set<String> = ["SUBSCRIBED", "DID_RENEW", "OFFER_REDEEMED", "ONE_TIME_CHARGE", "RENEWAL_EXTENDED"]

    /// For a notification that changes the state of a subscription (renewal status or preference, billing failure,
    /// expiry, refund, revocation, reversal): nil when it concerns the user's current subscription, else why it is not
    /// applied. An event of one purchase chain never ends, downgrades or refunds another one of the same account (a
    /// family member's own subscription when the shared access lapses, a Stripe subscription after an old Apple one).
    func anotherChain(
        _ tx: any SQLExecutor, userID: String, type: String, subtype: String?, transaction: AppleTransaction
    ) async throws -> BillingVerdict? {
        if Self.periodTypes.contains(type) || (type == "DID_CHANGE_RENEWAL_PREF" && subtype == "UPGRADE") { return nil }
        // A refund or its reversal of the account's own purchase names its own period: it takes back or gives back that
        // period's tokens whichever subscription is current now (and changes access only when its period is the current
        // one). Shared access revoked touches only a subscription that came from it.
        if ["REFUND", "REVOKE", "REFUND_REVERSED"].contains(type) && !transaction.isFamilyShared { return nil }
        guard !catalog.tokenPacks.contains(where: { $0.appleProductId == transaction.productId }),
            let current = try await machine.lockedSubscription(userID: userID, tx), let bound = current.providerSubscriptionID,
            bound != transaction.originalTransactionId
        else { return nil }
        return BillingVerdict(outcome: .ignored, detail: "\(type) concerns another purchase than the account's current subscription", userID: userID)
    }

    /// Notifications stored as unmatched for this purchase, applied now that it has an account (oldest first).
    func replayUnmatchedApple(_ tx: any SQLExecutor, originalTransactionID: String) async throws {
        guard let apple else { return }
        let rows = try await tx.query(
            "SELECT id, raw FROM billing_events WHERE provider = 'apple' AND original_id = ? AND verdict = 'unmatched' ORDER BY signed_at_ms, received_at_ms",
            [originalTransactionID])
        for row in rows {
            let id = try row.string("id")
            guard let body = try? UntrustedJSON.decode(AppleNotificationBody.self, from: Data(try row.string("raw").utf8)),
                let notification = try? await apple.verifyNotification(body.signedPayload)
            else { continue }
            let verdict = try await applyAppleNotification(tx, notification)
            try await settle(
                tx, eventID: id, BillingVerdict(outcome: verdict.outcome, detail: "replayed: \(verdict.detail ?? "")", userID: verdict.userID))
        }
    }
}

/// `POST /api/webhooks/apple`'s body (`ResponseBodyV2`).
public struct AppleNotificationBody: Codable, Sendable {
    public let signedPayload: String
    public init(signedPayload: String) { self.signedPayload = signedPayload }
}

extension AppleTransaction {
    /// The period this transaction paid for: it starts at the purchase date, as ``BillingService/applyAppleTransaction`` starts it.
    var periodKey: String { SubscriptionMachine.periodKey(Date(epochMilliseconds: purchaseDate)) }
}
