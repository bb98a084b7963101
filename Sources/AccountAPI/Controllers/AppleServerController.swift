import AppStoreServer
import Auth
import Billing
import Entitlements
import Foundation
import HTTPTypes
import Hummingbird

/// What uses Apple's App Store Server API: the user's consent to share consumption data with Apple (CONSUMPTION_REQUEST
/// answers need it), StoreKit offer signatures, and an operator's reconciliation of one account with Apple's records.
/// The API parts answer 503 `unavailable` unless `APPLE_API_*` is configured.
struct AppleServerController: Sendable {
    let auth: AuthService
    let billing: BillingService
    let appStore: AppStoreServerClient?
    let offers: AppleOfferSigner?
    let authenticator: Authenticator

    struct ConsentRequest: Decodable { let appleConsumptionData: Bool }
    struct ConsentResponse: Encodable, Sendable { let appleConsumptionData: Bool }
    struct OfferRequest: Decodable { let productId: String; let offerId: String; let kind: String? }
    struct OfferResponse: Encodable, Sendable {
        let productId: String; let offerId: String; let keyIdentifier: String; let nonce: String; let timestamp: Int64; let signature: String
        let appAccountToken: String
    }
    struct ReconcileResponse: Encodable, Sendable { let userId: String; let chains: Int; let transactions: Int; let repairs: [String] }
    struct OrderTransactionJSON: Encodable, Sendable {
        let transactionId: String; let originalTransactionId: String; let productId: String; let purchaseDate: String; let revoked: Bool
        let userId: String?
    }
    struct OrderResponse: Encodable, Sendable { let orderId: String; let valid: Bool; let transactions: [OrderTransactionJSON] }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.get("/api/user/consent", use: consent)
        router.post("/api/user/consent", use: setConsent)
        router.post("/api/iap/apple/offer-signature", use: offerSignature)
        router.post("/api/admin/users/:userId/apple/reconcile", use: reconcile)
        router.get("/api/admin/apple/orders/:orderId", use: order)
    }

    @Sendable func consent(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<ConsentResponse> {
        let session = try await authenticator.session(request, context)
        try auth.requireOwnerProfile(session)
        return JSONResponse(
            ConsentResponse(appleConsumptionData: try await billing.appleConsumptionConsent(userID: session.user.id, logger: context.logger)))
    }

    /// The owner's choice, audited; it applies to requests answered from now on.
    @Sendable func setConsent(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<ConsentResponse> {
        let session = try await authenticator.session(request, context)
        try auth.requireOwnerProfile(session)
        var request = request
        let body = try await request.decodeJSON(ConsentRequest.self, context: context)
        try await billing.setAppleConsumptionConsent(
            userID: session.user.id, body.appleConsumptionData, ip: context.client(request).ip, logger: context.logger)
        return JSONResponse(ConsentResponse(appleConsumptionData: body.appleConsumptionData))
    }

    /// A signature for `Product.PurchaseOption.promotionalOffer` (StoreKit 2) or `SKPaymentDiscount`, for an eligible account
    /// and a profile that may make purchases.
    @Sendable func offerSignature(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<OfferResponse> {
        let session = try await authenticator.session(request, context)
        guard let offers else {
            throw BillingError.notConfigured("StoreKit offer signatures need APPLE_API_KEY_ID, APPLE_API_ISSUER_ID and APPLE_API_PRIVATE_KEY_FILE.")
        }
        guard try await authenticator.permissions(session, context)?.canMakePurchases != false else { throw EntitlementError.purchaseNotAllowed }
        var request = request
        let body = try await request.decodeJSON(OfferRequest.self, context: context)
        let identifier = /[A-Za-z0-9._\-]{1,100}/
        guard body.productId.wholeMatch(of: identifier) != nil, body.offerId.wholeMatch(of: identifier) != nil else {
            throw Problem.validation("productId and offerId must be 1 to 100 letters, digits, '.', '_' or '-'.")
        }
        guard let kind = AppleOfferKind(rawValue: body.kind ?? "promotional") else {
            throw Problem.validation("Field 'kind' must be 'promotional' or 'win_back'.")
        }
        let signed = try await billing.signAppleOffer(
            offers, userID: session.user.id, productID: body.productId, offerID: body.offerId, kind: kind, logger: context.logger)
        return JSONResponse(
            OfferResponse(
                productId: body.productId, offerId: body.offerId, keyIdentifier: signed.keyIdentifier, nonce: signed.nonce,
                timestamp: signed.timestamp,
                signature: signed.signature, appAccountToken: signed.appAccountToken))
    }

    /// Operators: the transactions of the order id on a customer's receipt email, and whose they are here.
    @Sendable func order(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<OrderResponse> {
        _ = try await authenticator.requireOperator(request, context)
        guard let appStore else {
            throw BillingError.notConfigured("Order lookups need APPLE_API_KEY_ID, APPLE_API_ISSUER_ID and APPLE_API_PRIVATE_KEY_FILE.")
        }
        let orderID = try context.pathParameter("orderId")
        guard orderID.wholeMatch(of: /[A-Za-z0-9]{1,64}/) != nil else { throw Problem.validation("An order id is 1 to 64 letters and digits.") }
        let found = try await Self.apple { try await billing.lookUpAppleOrder(orderID, client: appStore, logger: context.logger) }
        return JSONResponse(
            OrderResponse(
                orderId: orderID, valid: found != nil,
                transactions: (found ?? []).map {
                    OrderTransactionJSON(
                        transactionId: $0.transaction.transactionId, originalTransactionId: $0.transaction.originalTransactionId,
                        productId: $0.transaction.productId,
                        purchaseDate: ISODate.string(Date(timeIntervalSince1970: Double($0.transaction.purchaseDate) / 1000)),
                        revoked: $0.transaction.revocationDate != nil, userId: $0.userID)
                }))
    }

    /// A call that reaches Apple: Apple unreachable or failing after its retries is the outage it is (503).
    static func apple<T>(_ body: () async throws -> T) async throws -> T {
        do { return try await body() } catch let error as AppStoreServerError {
            throw Problem.unavailable("Apple's App Store Server API: \(error.detail)", retryAfterSeconds: 60)
        }
    }

    /// Operators: compare one account's Apple purchases with Apple's records now and repair what is missing.
    @Sendable func reconcile(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<ReconcileResponse> {
        _ = try await authenticator.requireOperator(request, context)
        guard let appStore else {
            throw BillingError.notConfigured("Reconciliation needs APPLE_API_KEY_ID, APPLE_API_ISSUER_ID and APPLE_API_PRIVATE_KEY_FILE.")
        }
        let userID = try await authenticator.existingUser(context)
        let report = try await Self.apple { try await billing.reconcileApple(userID: userID, client: appStore, logger: context.logger) }
        return JSONResponse(ReconcileResponse(userId: userID, chains: report.chains, transactions: report.transactions, repairs: report.repairs))
    }
}
