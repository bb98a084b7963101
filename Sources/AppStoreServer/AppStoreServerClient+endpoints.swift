import Foundation
import Logging
import NIOHTTP1

/// A page of signed transactions (transaction history, refund history).
public struct SignedTransactionsPage: Decodable, Sendable {
    public let signedTransactions: [String]
    public let revision: String?
    public let hasMore: Bool?
}

/// Get All Subscription Statuses: per subscription group, the last transaction of each chain.
public struct SubscriptionStatuses: Decodable, Sendable {
    public struct Group: Decodable, Sendable {
        public let subscriptionGroupIdentifier: String?
        public let lastTransactions: [LastTransaction]
    }
    public struct LastTransaction: Decodable, Sendable {
        public let originalTransactionId: String
        /// 1 active, 2 expired, 3 billing retry, 4 grace period, 5 revoked.
        public let status: Int
        public let signedTransactionInfo: String
        public let signedRenewalInfo: String?
    }
    public let environment: String?
    public let bundleId: String?
    public let data: [Group]
}

/// Look Up Order ID: status 0 valid, 1 invalid; the order's signed transactions.
public struct OrderLookup: Decodable, Sendable {
    public let status: Int
    public let signedTransactions: [String]?
}

/// Send Consumption Information (v2) body.
public struct ConsumptionInformation: Encodable, Sendable, Equatable {
    public let customerConsented: Bool
    public let sampleContentProvided: Bool
    /// DELIVERED, UNDELIVERED_QUALITY_ISSUE, UNDELIVERED_WRONG_ITEM, UNDELIVERED_SERVER_OUTAGE, UNDELIVERED_OTHER.
    public let deliveryStatus: String
    /// Milliunits (0–100,000) of the purchase consumed; consumables, non-consumables and non-renewing subscriptions only.
    public let consumptionPercentage: Int?
    /// DECLINE, GRANT_FULL or GRANT_PRORATED; nil: no preference.
    public let refundPreference: String?

    public init(customerConsented: Bool, sampleContentProvided: Bool, deliveryStatus: String, consumptionPercentage: Int?, refundPreference: String?)
    {
        self.customerConsented = customerConsented
        self.sampleContentProvided = sampleContentProvided
        self.deliveryStatus = deliveryStatus
        self.consumptionPercentage = consumptionPercentage
        self.refundPreference = refundPreference
    }
}

/// Extend a Subscription Renewal Date's answer.
public struct RenewalExtension: Decodable, Sendable {
    public let originalTransactionId: String?
    public let webOrderLineItemId: String?
    public let success: Bool
    public let effectiveDate: Int64?
}

extension AppStoreServerClient {
    /// Get Transaction History (v2), one page; pass the previous page's `revision` for the next.
    public func transactionHistory(
        _ transactionID: String, revision: String? = nil, logger: Logger
    ) async throws(AppStoreServerError) -> SignedTransactionsPage {
        let query = revision.map { "?revision=\(Self.escaped($0))" } ?? ""
        let (_, data) = try await call(.GET, "/inApps/v2/history/\(Self.escaped(transactionID))\(query)", logger: logger)
        return try decode(SignedTransactionsPage.self, data)
    }

    /// Get All Subscription Statuses for the chain of any of its transactions.
    public func subscriptionStatuses(_ transactionID: String, logger: Logger) async throws(AppStoreServerError) -> SubscriptionStatuses {
        let (_, data) = try await call(.GET, "/inApps/v1/subscriptions/\(Self.escaped(transactionID))", logger: logger)
        return try decode(SubscriptionStatuses.self, data)
    }

    /// Get Refund History (v2), one page.
    public func refundHistory(
        _ transactionID: String, revision: String? = nil, logger: Logger
    ) async throws(AppStoreServerError) -> SignedTransactionsPage {
        let query = revision.map { "?revision=\(Self.escaped($0))" } ?? ""
        let (_, data) = try await call(.GET, "/inApps/v2/refund/lookup/\(Self.escaped(transactionID))\(query)", logger: logger)
        return try decode(SignedTransactionsPage.self, data)
    }

    /// Look Up Order ID (the order id on the customer's receipt email).
    public func lookUpOrder(_ orderID: String, logger: Logger) async throws(AppStoreServerError) -> OrderLookup {
        let (_, data) = try await call(.GET, "/inApps/v1/lookup/\(Self.escaped(orderID))", logger: logger)
        return try decode(OrderLookup.self, data)
    }

    /// Send Consumption Information (v2): Apple answers 202.
    public func sendConsumption(_ transactionID: String, _ information: ConsumptionInformation, logger: Logger) async throws(AppStoreServerError) {
        let body: Data
        do { body = try JSONEncoder().encode(information) } catch { throw .malformedAnswer("the consumption information cannot be encoded") }
        _ = try await call(.PUT, "/inApps/v2/transactions/consumption/\(Self.escaped(transactionID))", body: body, logger: logger)
    }

    /// Extend a Subscription Renewal Date by `days` (1–90) for `reason` (0 undeclared, 1 satisfaction, 2 other, 3 outage);
    /// `requestID` makes a retry of the same extension apply once at Apple.
    public func extendRenewalDate(
        _ originalTransactionID: String, days: Int, reason: Int, requestID: String, logger: Logger
    ) async throws(AppStoreServerError) -> RenewalExtension {
        struct Body: Encodable { let extendByDays: Int; let extendReasonCode: Int; let requestIdentifier: String }
        let body: Data
        do { body = try JSONEncoder().encode(Body(extendByDays: days, extendReasonCode: reason, requestIdentifier: requestID)) } catch {
            throw .malformedAnswer("the extension cannot be encoded")
        }
        let (_, data) = try await call(.PUT, "/inApps/v1/subscriptions/extend/\(Self.escaped(originalTransactionID))", body: body, logger: logger)
        return try decode(RenewalExtension.self, data)
    }
}
