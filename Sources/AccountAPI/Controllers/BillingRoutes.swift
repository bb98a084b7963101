import Auth
import Entitlements
import Foundation
import HTTPTypes
import Hummingbird
import Ledger
import Logging
import NIOCore
import Storage

extension BillingError {
    var problem: Problem {
        switch self {
        case .notConfigured(let detail): Problem.unavailable(detail, retryAfterSeconds: 300)
        case .apple(let error): Problem(.badRequest, code: "invalid_signed_payload", detail: error.detail)
        case .stripe(let error): Problem(.badRequest, code: "invalid_signature", detail: error.detail)
        case .malformed(let detail): Problem.validation(detail)
        case .accountTokenMismatch:
            Problem(.forbidden, code: "account_mismatch", detail: "The transaction's appAccountToken names another account than the signed-in one.")
        case .boundToAnotherAccount:
            Problem(.conflict, code: "purchase_bound_elsewhere", detail: "This purchase already belongs to another account; it is never moved silently. Contact support.")
        case .unknownProduct(let id): Problem.validation("productId '\(id)' is not a plan or token pack in the catalog.")
        case .transactionRevoked: Problem(.conflict, code: "transaction_revoked", detail: "The transaction was refunded or revoked; it grants nothing.")
        }
    }
}

/// Apple purchases and notifications, Stripe webhooks, and the operator's view of every received event.
struct BillingRoutes: Sendable {
    let database: any Database
    let billing: BillingService
    let authenticator: Authenticator
    let subscriptionRoutes: SubscriptionRoutes
    let tokenRoutes: TokenRoutes

    struct VerifyRequest: Decodable { let signedTransaction: String }
    struct VerifyResponse: Encodable, Sendable {
        let transactionId: String
        let productId: String
        let environment: String
        /// What the transaction did now: applied, or duplicate when it was already applied (verify is idempotent).
        let outcome: String
        let subscription: SubscriptionJSON
        let tokenBalance: TokenRoutes.TokenBalanceJSON
    }
    struct ReceivedResponse: Encodable, Sendable { let received: Bool; let outcome: String }
    struct EventJSON: Encodable, Sendable {
        let id: String; let provider: String; let source: String; let externalId: String?; let eventType: String?; let userId: String?
        let originalId: String?; let environment: String?; let outcome: String; let detail: String?; let signedAt: String?; let receivedAt: String
        let appliedAt: String?; let rawSha256: String; let raw: String
    }
    struct EventsResponse: Encodable, Sendable { let events: [EventJSON]; let nextCursor: String? }

    func register(on router: Router<AppRequestContext>) {
        router.post("/api/iap/apple/verify") { request, context in
            var request = request
            let session = try await authenticator.session(request, context)
            if try await authenticator.permissions(session, context)?.canMakePurchases == false { throw EntitlementError.purchaseNotAllowed }
            _ = try billing.requireApple()
            let body = try await request.decodeJSON(VerifyRequest.self, context: context)
            let raw = body.signedTransaction  // the JWS itself is what is stored for audit
            let (transaction, environment) = try await verified(provider: "apple", context: context) {
                try await billing.verifyAppleTransaction(body.signedTransaction)
            }
            let userID = session.user.id
            let verdict = try await verifiedOrRecorded(provider: "apple", source: "verify", raw: raw, context: context) {
                try await database.transaction(logger: context.logger) { tx in
                    try await billing.applyVerifiedPurchase(tx, userID: userID, transaction: transaction, environment: environment, raw: raw)
                }
            }
            AppMetrics.billingEvent(provider: "apple", outcome: verdict.verdict)
            context.logger.info("apple purchase verified", metadata: ["outcome": "\(verdict.verdict)", "environment": "\(environment.rawValue)"])
            return JSONResponse(
                VerifyResponse(
                    transactionId: transaction.transactionId, productId: transaction.productId, environment: environment.rawValue, outcome: verdict.verdict,
                    subscription: try await subscriptionRoutes.snapshot(userID: userID, logger: context.logger),
                    tokenBalance: try await tokenRoutes.balance(userID: userID, logger: context.logger)))
        }
        router.post("/api/webhooks/apple") { request, context in
            var request = request
            _ = try billing.requireApple()
            let raw = String(decoding: Data(try await request.rawBody(context: context).readableBytesView), as: UTF8.self)
            let notification = try await verified(provider: "apple", context: context) {
                guard let body = try? JSONDecoder().decode(AppleNotificationBody.self, from: Data(raw.utf8)) else {
                    throw BillingError.malformed("The body must be {\"signedPayload\": \"<JWS>\"}.")
                }
                return try await billing.verifyAppleNotification(body.signedPayload)
            }
            let verdict = try await database.transaction(logger: context.logger) { tx in
                try await billing.handleAppleNotification(tx, notification, raw: raw)
            }
            AppMetrics.billingEvent(provider: "apple", outcome: verdict.verdict)
            context.logger.info(
                "apple notification", metadata: ["type": "\(notification.notificationType)", "outcome": "\(verdict.verdict)"])
            return JSONResponse(ReceivedResponse(received: true, outcome: verdict.verdict))
        }
        router.post("/api/webhooks/stripe") { request, context in
            var request = request
            _ = try billing.requireStripe()
            let buffer = try await request.rawBody(context: context)
            let bytes = Array(buffer.readableBytesView)
            let raw = String(decoding: bytes, as: UTF8.self)
            try await verified(provider: "stripe", context: context) {
                try billing.verifyStripe(rawBody: bytes, header: request.headers[HTTPField.Name("Stripe-Signature")!])
            }
            let verdict = try await verifiedOrRecorded(provider: "stripe", source: "webhook", raw: raw, context: context) {
                try await database.transaction(logger: context.logger) { tx in try await billing.handleStripeEvent(tx, raw: raw) }
            }
            AppMetrics.billingEvent(provider: "stripe", outcome: verdict.verdict)
            context.logger.info("stripe event", metadata: ["outcome": "\(verdict.verdict)"])
            return JSONResponse(ReceivedResponse(received: true, outcome: verdict.verdict))
        }
        router.get("/api/admin/billing/events") { request, context in
            _ = try await authenticator.requireOperator(request, context)
            let query = request.uri.queryParameters
            let limit = try query["limit"].map { raw -> Int in
                guard let n = Int(String(raw)), (1...200).contains(n) else { throw Problem.validation("limit must be from 1 to 200.") }
                return n
            } ?? 50
            let provider = query["provider"].map(String.init)
            if let provider, provider != "apple" && provider != "stripe" { throw Problem.validation("provider must be apple or stripe.") }
            let before = try query["cursor"].map { raw -> BillingCursor in
                guard let cursor = BillingCursor(String(raw)) else { throw Problem.validation("cursor must be a nextCursor from an earlier page.") }
                return cursor
            }
            let userID = query["userId"].map(String.init)
            let events = try await database.withConnection(logger: context.logger) { tx in
                try await billing.events(tx, userID: userID, provider: provider, limit: limit, before: before)
            }
            return JSONResponse(
                EventsResponse(
                    events: events.map { e in
                        EventJSON(
                            id: e.id, provider: e.provider, source: e.source, externalId: e.externalID, eventType: e.eventType, userId: e.userID,
                            originalId: e.originalID, environment: e.environment, outcome: e.verdict, detail: e.detail, signedAt: e.signedAt.map(AuthRoutes.iso),
                            receivedAt: AuthRoutes.iso(e.receivedAt), appliedAt: e.appliedAt.map(AuthRoutes.iso), rawSha256: e.rawSHA256, raw: e.raw)
                    },
                    nextCursor: events.count == limit ? events.last.map { BillingCursor(receivedAt: $0.receivedAt, id: $0.id).description } : nil))
        }
    }

    /// Runs a signature or payload verification. A payload that fails it is not stored (anyone can send one): it is
    /// counted (`billing_events{outcome="unverified"}`), logged without its body, and answered with its 4xx problem.
    func verified<T>(provider: String, context: AppRequestContext, _ verify: () async throws -> T) async throws -> T {
        do {
            return try await verify()
        } catch let error as BillingError {
            if case .notConfigured = error { throw error }
            AppMetrics.billingEvent(provider: provider, outcome: "unverified")
            context.logger.notice("billing payload failed verification", metadata: ["provider": "\(provider)", "reason": "\(error.problem.detail)"])
            throw error
        }
    }

    /// Applies a verified event that can still be refused (an unknown product, another account's purchase); a refusal is
    /// stored (raw, with the reason) in its own transaction and answered with its 4xx problem.
    func verifiedOrRecorded<T>(
        provider: String, source: String, raw: String, context: AppRequestContext, _ verify: () async throws -> T
    ) async throws -> T {
        do {
            return try await verify()
        } catch let error as BillingError {
            if case .notConfigured = error { throw error }
            try await billing.recordRejected(database, provider: provider, source: source, raw: raw, detail: error.problem.detail, logger: context.logger)
            AppMetrics.billingEvent(provider: provider, outcome: "rejected")
            context.logger.notice("billing payload rejected", metadata: ["provider": "\(provider)", "reason": "\(error.problem.detail)"])
            throw error
        }
    }
}
