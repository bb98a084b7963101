import Auth
import Billing
import Entitlements
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// Apple purchases and notifications, Stripe webhooks.
struct BillingController: Sendable {
    let billing: BillingService
    let entitlements: EntitlementService
    let authenticator: Authenticator

    struct VerifyRequest: Decodable { let signedTransaction: String }
    struct VerifyResponse: Encodable, Sendable {
        let transactionId: String
        let productId: String
        let environment: String
        /// What the transaction did now: applied, or duplicate when it was already applied (verify is idempotent).
        let outcome: String
        let subscription: SubscriptionJSON
        let tokenBalance: TokenBalanceJSON
    }
    struct ReceivedResponse: Encodable, Sendable { let received: Bool; let outcome: String }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.post("/api/iap/apple/verify", use: appleVerify)
        router.post("/api/webhooks/apple", use: appleNotification)
        router.post("/api/webhooks/stripe", use: stripeWebhook)
    }

    @Sendable func appleVerify(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<VerifyResponse> {
        let session = try await authenticator.session(request, context)
        let canMakePurchases = try await authenticator.permissions(session, context)?.canMakePurchases != false
        var request = request
        let body = try await request.decodeJSON(VerifyRequest.self, context: context)
        let userID = session.user.id
        let (transaction, environment, verdict) = try await billing.verifyApplePurchase(
            body.signedTransaction, userID: userID, canMakePurchases: canMakePurchases, authorise: authenticator.auth.stillLive(session),
            logger: context.logger)
        return JSONResponse(
            VerifyResponse(
                transactionId: transaction.transactionId, productId: transaction.productId, environment: environment.rawValue,
                outcome: verdict.outcome.rawValue,
                subscription: SubscriptionJSON(try await entitlements.subscriptionView(userID: userID, logger: context.logger)),
                tokenBalance: TokenBalanceJSON(try await entitlements.tokenBalance(userID: userID, logger: context.logger))))
    }

    @Sendable func appleNotification(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<ReceivedResponse> {
        _ = try billing.requireApple()
        var request = request
        let raw = String(decoding: Data(try await request.rawBody(context: context).readableBytesView), as: UTF8.self)
        let verdict = try await billing.receiveAppleNotification(raw: raw, logger: context.logger)
        return JSONResponse(ReceivedResponse(received: true, outcome: verdict.outcome.rawValue))
    }

    @Sendable func stripeWebhook(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<ReceivedResponse> {
        _ = try billing.requireStripe()
        var request = request
        let bytes = Array(try await request.rawBody(context: context).readableBytesView)
        let verdict = try await billing.receiveStripeEvent(
            rawBody: bytes, signature: request.headers[.stripeSignature], logger: context.logger)
        return JSONResponse(ReceivedResponse(received: true, outcome: verdict.outcome.rawValue))
    }
}
