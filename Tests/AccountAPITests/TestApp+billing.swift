import Billing
import Entitlements
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import NIOCore
import Storage
import TestSupport
import Testing

@testable import AccountAPI

/// Signs StoreKit payloads and Stripe events the way Apple and Stripe do, for a test app configured to trust them.
struct BillingFixture: Sendable {
    static let bundle = "com.yourapp.ios"
    static let stripeSecret = "whsec_test_secret_0123456789"
    let chain: AppleTestChain
    let root: ScratchFile

    init() throws {
        chain = try AppleTestChain()
        root = try ScratchFile(chain.rootPEM, prefix: "apple-root-", suffix: ".pem")
    }

    /// Apple (Sandbox) and Stripe configured.
    var configure: @Sendable (inout AppConfig) -> Void {
        { [root] config in
            config.apple = AppConfig.AppleSettings(
                rootCertificatePaths: [root.path], bundleID: Self.bundle, appAppleID: nil, environment: .sandbox, acceptSandbox: false)
            config.stripeWebhookSecrets = ["whsec_retired_secret_000000", Self.stripeSecret]
        }
    }

    static func ms(_ date: Date) -> Int64 { date.epochMilliseconds }

    func transaction(
        id: String, original: String? = nil, product: String, purchase: Date, expires: Date? = nil, token: String?, signed: Date? = nil,
        revocationPercentage: Int? = nil, revoked: Date? = nil, environment: String = "Sandbox", ownership: String = "PURCHASED"
    ) throws -> String {
        var payload: [String: any Sendable] = [
            "transactionId": id, "originalTransactionId": original ?? id, "bundleId": Self.bundle, "productId": product,
            "purchaseDate": Self.ms(purchase), "signedDate": Self.ms(signed ?? purchase), "environment": environment, "quantity": 1,
            "type": expires == nil ? "Consumable" : "Auto-Renewable Subscription", "inAppOwnershipType": ownership,
        ]
        if let expires { payload["expiresDate"] = Self.ms(expires) }
        if let token { payload["appAccountToken"] = token.uppercased() }
        if let revocationPercentage { payload["revocationPercentage"] = revocationPercentage }
        if let revoked { payload["revocationDate"] = Self.ms(revoked); payload["revocationReason"] = 0 }
        return try chain.sign(json: payload)
    }

    func renewal(original: String, autoRenewProduct: String, autoRenew: Bool = true, grace: Date? = nil, signed: Date) throws -> String {
        var payload: [String: any Sendable] = [
            "originalTransactionId": original, "autoRenewProductId": autoRenewProduct, "autoRenewStatus": autoRenew ? 1 : 0, "environment": "Sandbox",
            "signedDate": Self.ms(signed),
        ]
        if let grace { payload["gracePeriodExpiresDate"] = Self.ms(grace) }
        return try chain.sign(json: payload)
    }

    /// A notification body `{"signedPayload": …}`.
    func notification(
        _ type: String, subtype: String? = nil, uuid: String = UUID().uuidString, signed: Date, transaction: String?, renewal: String? = nil
    )
        throws -> String
    {
        var data: [String: any Sendable] = ["environment": "Sandbox", "bundleId": Self.bundle, "appAppleId": 1234]
        if let transaction { data["signedTransactionInfo"] = transaction }
        if let renewal { data["signedRenewalInfo"] = renewal }
        var payload: [String: any Sendable] = [
            "notificationType": type, "notificationUUID": uuid, "signedDate": Self.ms(signed), "version": "2.0", "data": data,
        ]
        if let subtype { payload["subtype"] = subtype }
        return #"{"signedPayload":"\#(try chain.sign(json: payload))"}"#
    }
}

struct VerifyBody: Decodable {
    let transactionId: String
    let outcome: String
    let environment: String
    struct Sub: Decodable { let planId: String; let status: String?; let isEntitled: Bool; let willRenew: Bool; let pendingPlanId: String? }
    let subscription: Sub
    let tokenBalance: BalanceBody
}

struct ReceivedBody: Decodable { let received: Bool; let outcome: String }
struct EventsBody: Decodable {
    struct Event: Decodable {
        let id: String; let provider: String; let source: String; let eventType: String?; let userId: String?; let outcome: String;
        let detail: String?; let raw: String
    }
    let events: [Event]
    let nextCursor: String?
}

extension TestClientProtocol {
    func appleVerify(_ token: String, _ jws: String) async throws -> TestResponse {
        try await send(.post, "/api/iap/apple/verify", token: token, json: #"{"signedTransaction":"\#(jws)"}"#)
    }

    func appleNotify(_ body: String) async throws -> TestResponse { try await post("/api/webhooks/apple", json: body) }

    func stripe(_ body: String, at date: Date, secret: String = BillingFixture.stripeSecret) async throws -> TestResponse {
        let header = StripeSignatureVerifier.header(rawBody: Array(body.utf8), secret: secret, timestamp: Int64(date.timeIntervalSince1970))
        return try await post("/api/webhooks/stripe", json: body, headers: [HTTPField.Name("Stripe-Signature")!: header])
    }

    func subscription(_ token: String) async throws -> VerifyBody.Sub {
        try await get("/api/user/subscription", token: token).json(VerifyBody.Sub.self)
    }
    func balance(_ token: String) async throws -> BalanceBody { try await get("/api/user/token-balance", token: token).json(BalanceBody.self) }
}

func stripeEvent(_ id: String, _ type: String, created: Date, _ object: String) -> String {
    #"{"id":"\#(id)","object":"event","type":"\#(type)","created":\#(Int64(created.timeIntervalSince1970)),"livemode":false,"data":{"object":\#(object)}}"#
}
