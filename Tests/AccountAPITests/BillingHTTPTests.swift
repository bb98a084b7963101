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
    let rootPath: String

    init() throws {
        chain = try AppleTestChain()
        rootPath = FileManager.default.temporaryDirectory.appendingPathComponent("apple-root-\(UUID().uuidString).pem").path
        try chain.rootPEM.write(toFile: rootPath, atomically: true, encoding: .utf8)
    }

    /// Apple (Sandbox) and Stripe configured.
    var configure: @Sendable (inout AppConfig) -> Void {
        { [rootPath] config in
            config.apple = AppConfig.AppleSettings(
                rootCertificatePaths: [rootPath], bundleID: Self.bundle, appAppleID: nil, environment: .sandbox, acceptSandbox: false)
            config.stripeWebhookSecrets = ["whsec_retired_secret_000000", Self.stripeSecret]
        }
    }

    static func ms(_ date: Date) -> Int64 { date.epochMilliseconds }

    func transaction(
        id: String, original: String? = nil, product: String, purchase: Date, expires: Date? = nil, token: String?, signed: Date? = nil,
        revocationPercentage: Int? = nil, revoked: Date? = nil, environment: String = "Sandbox"
    ) throws -> String {
        var payload: [String: any Sendable] = [
            "transactionId": id, "originalTransactionId": original ?? id, "bundleId": Self.bundle, "productId": product,
            "purchaseDate": Self.ms(purchase), "signedDate": Self.ms(signed ?? purchase), "environment": environment, "quantity": 1,
            "type": expires == nil ? "Consumable" : "Auto-Renewable Subscription", "inAppOwnershipType": "PURCHASED",
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
    func notification(_ type: String, subtype: String? = nil, uuid: String = UUID().uuidString, signed: Date, transaction: String?, renewal: String? = nil)
        throws -> String
    {
        var data: [String: any Sendable] = ["environment": "Sandbox", "bundleId": Self.bundle, "appAppleId": 1234]
        if let transaction { data["signedTransactionInfo"] = transaction }
        if let renewal { data["signedRenewalInfo"] = renewal }
        var payload: [String: any Sendable] = ["notificationType": type, "notificationUUID": uuid, "signedDate": Self.ms(signed), "version": "2.0", "data": data]
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
    struct Event: Decodable { let id: String; let provider: String; let source: String; let eventType: String?; let userId: String?; let outcome: String; let detail: String?; let raw: String }
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

    func subscription(_ token: String) async throws -> VerifyBody.Sub { try await get("/api/user/subscription", token: token).json(VerifyBody.Sub.self) }
    func balance(_ token: String) async throws -> BalanceBody { try await get("/api/user/token-balance", token: token).json(BalanceBody.self) }
}

func stripeEvent(_ id: String, _ type: String, created: Date, _ object: String) -> String {
    #"{"id":"\#(id)","object":"event","type":"\#(type)","created":\#(Int64(created.timeIntervalSince1970)),"livemode":false,"data":{"object":\#(object)}}"#
}

@Suite("Billing over HTTP: Apple and Stripe")
struct BillingHTTPTests {
    @Test(arguments: TestDatabase.engines)
    func appleVerifyActivatesAtOnceIdempotentAndBoundToOneAccount(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let token = try await client.signUpAndVerify(app, email: "buyer@example.com")
            let user = try await app.userID(token: token)
            let now = app.clock.now()
            // A token pack: granted at once, once.
            let pack = try fx.transaction(id: "1001", product: "com.yourapp.tokens.25", purchase: now, token: user)
            let first = try await client.appleVerify(token, pack)
            #expect(first.status == .ok)
            let body = try first.json(VerifyBody.self)
            #expect(body.outcome == "applied" && body.environment == "Sandbox" && body.tokenBalance.purchasedTokens == 25 && body.tokenBalance.totalTokens == 28)
            let again = try await client.appleVerify(token, pack).json(VerifyBody.self)
            #expect(again.outcome == "duplicate" && again.tokenBalance.purchasedTokens == 25)
            // A subscription: the plan applies in the same response (no waiting for a notification).
            let sub = try fx.transaction(
                id: "2001", product: "com.yourapp.pro.monthly", purchase: now, expires: now.addingTimeInterval(30 * 86400), token: user)
            let subscribed = try await client.appleVerify(token, sub).json(VerifyBody.self)
            #expect(subscribed.subscription.planId == "pro_monthly" && subscribed.subscription.isEntitled && subscribed.subscription.status == "active")
            #expect(subscribed.tokenBalance.subscriptionTokens > 0)
            let periodTokens = subscribed.tokenBalance.subscriptionTokens
            #expect(try await client.appleVerify(token, sub).json(VerifyBody.self).tokenBalance.subscriptionTokens == periodTokens)

            // A profile that may not purchase can't verify purchases either.
            let kid = try await client.createProfile(token, #"{"name":"Kid","canMakePurchases":false,"canUseCustomContentTypes":false}"#)
            #expect(kid.status == .created)
            let kidID = try kid.json(ProfileBody.self).id
            #expect(try await client.send(.post, "/api/profiles/select", token: token, json: #"{"profileId":"\#(kidID)"}"#).status == .ok)
            let blocked = try await client.appleVerify(token, try fx.transaction(id: "1002", product: "com.yourapp.tokens.25", purchase: now, token: user))
            #expect(try blocked.status == .forbidden && blocked.problem().code == "purchase_not_allowed")
            #expect(try await client.balance(token).purchasedTokens == 25)

            // Another account can't take the purchase over, with or without an appAccountToken.
            let other = try await client.signUpAndVerify(app, email: "other@example.com")
            let otherUser = try await app.userID(token: other)
            let stolen = try await client.appleVerify(other, try fx.transaction(id: "2002", original: "2001", product: "com.yourapp.pro.monthly",
                purchase: now, expires: now.addingTimeInterval(30 * 86400), token: nil))
            #expect(stolen.status == .conflict)
            #expect(try stolen.problem().code == "purchase_bound_elsewhere")
            let mismatch = try await client.appleVerify(other, try fx.transaction(id: "3001", product: "com.yourapp.tokens.25", purchase: now, token: user))
            #expect(try mismatch.status == .forbidden && (mismatch.problem().code) == "account_mismatch")
            #expect(try await client.balance(other).purchasedTokens == 0)
            // Unknown products, revoked transactions and forged payloads are refused; nothing changes.
            let unknown = try await client.appleVerify(other, try fx.transaction(id: "4001", product: "com.other.thing", purchase: now, token: otherUser))
            #expect(try unknown.status == .badRequest && (unknown.problem().detail.contains("com.other.thing")))
            let revoked = try await client.appleVerify(
                other, try fx.transaction(id: "4002", product: "com.yourapp.tokens.25", purchase: now, token: otherUser, revoked: now))
            #expect(try revoked.status == .conflict && (revoked.problem().code) == "transaction_revoked")
            let forged = try AppleTestChain().sign(json: ["transactionId": "5", "originalTransactionId": "5", "bundleId": BillingFixture.bundle,
                "productId": "com.yourapp.tokens.500", "purchaseDate": BillingFixture.ms(now), "environment": "Sandbox", "appAccountToken": otherUser])
            let refused = try await client.appleVerify(other, forged)
            #expect(try refused.status == .badRequest && (refused.problem().code) == "invalid_signed_payload")
            let production = try await client.appleVerify(
                other, try fx.transaction(id: "4003", product: "com.yourapp.tokens.25", purchase: now, token: otherUser, environment: "Production"))
            #expect(try production.status == .badRequest && (production.problem().detail.contains("Production")))
            #expect(try await client.balance(other).purchasedTokens == 0)
            // Every verified attempt is on record for operators, refused ones too; payloads that fail verification are not
            // stored (anyone can send them), only counted.
            let admin = try await app.apiKey(["admin"])
            let events = try await client.get("/api/admin/billing/events?provider=apple&limit=200", token: admin).json(EventsBody.self)
            #expect(events.events.contains { $0.outcome == "rejected" && $0.detail?.contains("com.other.thing") == true })
            #expect(!events.events.contains { $0.detail?.contains("not trusted") == true })
            #expect(events.events.filter { $0.userId == user && $0.source == "verify" }.count == 4)
            let page = try await client.get("/api/admin/billing/events?limit=1", token: admin).json(EventsBody.self)
            let next = try await client.get("/api/admin/billing/events?limit=1&cursor=\(try #require(page.nextCursor))", token: admin).json(EventsBody.self)
            #expect(page.events.count == 1 && next.events.count == 1 && page.events[0].id != next.events[0].id)
            #expect(try await client.get("/api/admin/billing/events", token: token).status == .forbidden)
            #expect(try await client.get("/api/admin/billing/events?cursor=zzz", token: admin).status == .badRequest)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func billingEndpointsAnswer503WhenNotConfigured(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "nocfg@example.com")
            let verify = try await client.appleVerify(token, "a.b.c")
            #expect(try verify.status == .serviceUnavailable && (verify.problem().detail.contains("APPLE_ROOT_CERTIFICATES")))
            #expect(try await client.appleNotify(#"{"signedPayload":"a.b.c"}"#).status == .serviceUnavailable)
            let stripe = try await client.stripe(#"{"id":"evt"}"#, at: app.clock.now())
            #expect(try stripe.status == .serviceUnavailable && (stripe.problem().detail.contains("STRIPE_WEBHOOK_SECRET")))
            // The rest of the service runs.
            #expect(try await client.get("/api/user/token-balance", token: token).status == .ok)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func appleNotificationsDriveTheLifecycleExactlyOnce(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            var token = try await client.signUpAndVerify(app, email: "life@example.com")
            let user = try await app.userID(token: token)
            let t0 = app.clock.now()
            let day: TimeInterval = 86400
            func txn(_ id: String, _ product: String, _ start: Date, days: Double = 30) throws -> String {
                try fx.transaction(id: id, original: "9000", product: product, purchase: start, expires: start.addingTimeInterval(days * day), token: user)
            }
            // TEST is acknowledged; SUBSCRIBED starts the plan; the same notificationUUID again changes nothing.
            let test = try await client.appleNotify(try fx.notification("TEST", signed: t0, transaction: nil))
            #expect(try test.status == .ok && (test.json(ReceivedBody.self).outcome) == "acknowledged")
            let subscribed = try fx.notification("SUBSCRIBED", subtype: "INITIAL_BUY", uuid: "n-1", signed: t0, transaction: try txn("9000", "com.yourapp.basic.monthly", t0))
            #expect(try await client.appleNotify(subscribed).json(ReceivedBody.self).outcome == "applied")
            #expect(try await client.appleNotify(subscribed).json(ReceivedBody.self).outcome == "duplicate")
            #expect(try await client.subscription(token).planId == "basic_monthly")
            let afterFirst = try await client.balance(token).subscriptionTokens
            #expect(afterFirst == 50)
            // The device posting the same transaction is a duplicate of the notification.
            #expect(try await client.appleVerify(token, try txn("9000", "com.yourapp.basic.monthly", t0)).json(VerifyBody.self).outcome == "duplicate")

            // DID_RENEW: a new period, tokens once.
            let t1 = t0.addingTimeInterval(30 * day)
            app.clock.set(t1.addingTimeInterval(60))
            token = try await client.signIn("life@example.com", "correct horse battery").json(SeedSignInResponse.self).session.token  // sessions idle out
            let renew = try fx.notification("DID_RENEW", uuid: "n-2", signed: t1, transaction: try txn("9001", "com.yourapp.basic.monthly", t1))
            #expect(try await client.appleNotify(renew).json(ReceivedBody.self).outcome == "applied")
            #expect(try await client.appleNotify(renew).json(ReceivedBody.self).outcome == "duplicate")
            #expect(try await client.balance(token).subscriptionTokens == 100)  // 50 rolled over (max 50) + 50

            // Auto-renew off, then an older notification (signed earlier) arrives late: recorded, never applied.
            let off = try fx.notification("DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_DISABLED", uuid: "n-3", signed: t1.addingTimeInterval(20),
                transaction: try txn("9001", "com.yourapp.basic.monthly", t1))
            #expect(try await client.appleNotify(off).json(ReceivedBody.self).outcome == "applied")
            #expect(try await client.subscription(token).willRenew == false)
            let lateOn = try fx.notification("DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_ENABLED", uuid: "n-old", signed: t1.addingTimeInterval(10),
                transaction: try txn("9001", "com.yourapp.basic.monthly", t1))
            #expect(try await client.appleNotify(lateOn).json(ReceivedBody.self).outcome == "stale")
            #expect(try await client.subscription(token).willRenew == false)

            // Downgrade at renewal is pending; upgrade applies now with the new plan's tokens.
            let down = try fx.notification("DID_CHANGE_RENEWAL_PREF", subtype: "DOWNGRADE", uuid: "n-4", signed: t1.addingTimeInterval(30),
                transaction: try txn("9001", "com.yourapp.basic.monthly", t1),
                renewal: try fx.renewal(original: "9000", autoRenewProduct: "com.yourapp.basic.yearly", signed: t1.addingTimeInterval(30)))
            #expect(try await client.appleNotify(down).json(ReceivedBody.self).outcome == "applied")
            let pending = try await client.subscription(token)
            #expect(pending.planId == "basic_monthly" && pending.pendingPlanId == "basic_yearly")
            let t2 = t1.addingTimeInterval(40)
            let up = try fx.notification("DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE", uuid: "n-5", signed: t2,
                transaction: try txn("9002", "com.yourapp.max.monthly", t2))
            #expect(try await client.appleNotify(up).json(ReceivedBody.self).outcome == "applied")
            let upgraded = try await client.subscription(token)
            #expect(upgraded.planId == "max_monthly" && upgraded.isEntitled)

            // Billing trouble: grace keeps access until its end; after it, no access; recovery restores.
            let t3 = t2.addingTimeInterval(30 * day)
            app.clock.set(t3.addingTimeInterval(60))
            token = try await client.signIn("life@example.com", "correct horse battery").json(SeedSignInResponse.self).session.token  // sessions idle out
            let graceEnd = t3.addingTimeInterval(16 * day)
            let fail = try fx.notification("DID_FAIL_TO_RENEW", subtype: "GRACE_PERIOD", uuid: "n-6", signed: t3,
                transaction: try txn("9002", "com.yourapp.max.monthly", t2),
                renewal: try fx.renewal(original: "9000", autoRenewProduct: "com.yourapp.max.monthly", grace: graceEnd, signed: t3))
            #expect(try await client.appleNotify(fail).json(ReceivedBody.self).outcome == "applied")
            let grace = try await client.subscription(token)
            #expect(grace.status == "grace" && grace.isEntitled)
            app.clock.set(graceEnd.addingTimeInterval(60))
            token = try await client.signIn("life@example.com", "correct horse battery").json(SeedSignInResponse.self).session.token  // sessions idle out
            let expiredGrace = try fx.notification("GRACE_PERIOD_EXPIRED", uuid: "n-7", signed: graceEnd, transaction: try txn("9002", "com.yourapp.max.monthly", t2))
            #expect(try await client.appleNotify(expiredGrace).json(ReceivedBody.self).outcome == "applied")
            #expect(try await client.subscription(token).isEntitled == false)
            let t4 = graceEnd.addingTimeInterval(day)
            app.clock.set(t4.addingTimeInterval(60))
            token = try await client.signIn("life@example.com", "correct horse battery").json(SeedSignInResponse.self).session.token  // sessions idle out
            let recovered = try fx.notification("DID_RENEW", subtype: "BILLING_RECOVERY", uuid: "n-8", signed: t4, transaction: try txn("9003", "com.yourapp.max.monthly", t4))
            #expect(try await client.appleNotify(recovered).json(ReceivedBody.self).outcome == "applied")
            #expect(try await client.subscription(token).isEntitled)

            // Refund: access ends and the period's tokens are clawed back (never below zero); reversal restores.
            let before = try await client.balance(token).subscriptionTokens
            let refund = try fx.notification("REFUND", uuid: "n-9", signed: t4.addingTimeInterval(100), transaction: try txn("9003", "com.yourapp.max.monthly", t4))
            #expect(try await client.appleNotify(refund).json(ReceivedBody.self).outcome == "applied")
            #expect(try await client.appleNotify(refund).json(ReceivedBody.self).outcome == "duplicate")
            #expect(try await client.subscription(token).isEntitled == false)
            let clawed = before - (try await client.balance(token).subscriptionTokens)
            #expect(clawed > 0)
            let reversed = try fx.notification("REFUND_REVERSED", uuid: "n-10", signed: t4.addingTimeInterval(200), transaction: try txn("9003", "com.yourapp.max.monthly", t4))
            #expect(try await client.appleNotify(reversed).json(ReceivedBody.self).outcome == "applied")
            #expect(try await client.balance(token).subscriptionTokens == before)
            #expect(try await client.subscription(token).isEntitled)

            // Expiry; informational types are stored and acknowledged.
            let expired = try fx.notification("EXPIRED", subtype: "VOLUNTARY", uuid: "n-11", signed: t4.addingTimeInterval(300), transaction: try txn("9003", "com.yourapp.max.monthly", t4))
            #expect(try await client.appleNotify(expired).json(ReceivedBody.self).outcome == "applied")
            #expect(try await client.subscription(token).isEntitled == false)
            let price = try fx.notification("PRICE_INCREASE", subtype: "PENDING", uuid: "n-12", signed: t4.addingTimeInterval(400), transaction: try txn("9003", "com.yourapp.max.monthly", t4))
            #expect(try await client.appleNotify(price).json(ReceivedBody.self).outcome == "acknowledged")

            // Bad notifications: 400, nothing applied, nothing stored.
            let foreign = try AppleTestChain(rootName: "Elsewhere")
            let forged = #"{"signedPayload":"\#(try foreign.sign(json: ["notificationType": "SUBSCRIBED", "notificationUUID": "x", "signedDate": 1, "data": ["bundleId": BillingFixture.bundle, "environment": "Sandbox"] as [String: any Sendable]]))"}"#
            let rejected = try await client.appleNotify(forged)
            #expect(try rejected.status == .badRequest && (rejected.problem().code) == "invalid_signed_payload")
            #expect(try await client.appleNotify(#"{"nope":1}"#).status == .badRequest)
            // Found by schemathesis: a NUL byte in a rejected body is a 400, not a 500.
            #expect(try await client.appleNotify("\u{0}").status == .badRequest)
            let stored = try await app.rows("SELECT verdict, COUNT(*) AS n FROM billing_events WHERE provider = 'apple' AND source = 'notification' GROUP BY verdict")
            let counts = Dictionary(uniqueKeysWithValues: try stored.map { (try $0.string("verdict"), try $0.int("n")) })
            #expect(counts["rejected"] == nil && counts["duplicate"] == 3 && counts["stale"] == 1)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func appleNotificationsForAnUnknownAccountApplyWhenThePurchaseIsVerified(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let token = try await client.signUpAndVerify(app, email: "later@example.com")
            let now = app.clock.now()
            // Bought outside the app (no appAccountToken): Apple's notification arrives first.
            let txn = try fx.transaction(id: "7000", product: "com.yourapp.pro.monthly", purchase: now, expires: now.addingTimeInterval(30 * 86400), token: nil)
            let early = try await client.appleNotify(try fx.notification("SUBSCRIBED", subtype: "INITIAL_BUY", signed: now, transaction: txn))
            #expect(try early.status == .ok && (early.json(ReceivedBody.self).outcome) == "unmatched")
            #expect(try await client.subscription(token).planId == "free")
            let renewalOff = try fx.notification("DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_DISABLED", signed: now.addingTimeInterval(5), transaction: txn)
            #expect(try await client.appleNotify(renewalOff).json(ReceivedBody.self).outcome == "unmatched")
            // The app posts the transaction: bound, the stored notifications apply in order, tokens once.
            app.clock.set(now.addingTimeInterval(60))
            let verified = try await client.appleVerify(token, txn).json(VerifyBody.self)
            #expect(verified.subscription.planId == "pro_monthly" && verified.subscription.willRenew == false)
            let rows = try await app.rows("SELECT verdict, detail FROM billing_events WHERE source = 'notification' ORDER BY signed_at_ms")
            #expect(try rows.map { try $0.string("verdict") } == ["applied", "applied"])
            #expect(rows.allSatisfy { $0.optionalString("detail")?.hasPrefix("replayed") == true })
            let grants = try await app.rows("SELECT COUNT(*) AS n FROM ledger_period_grants")
            #expect(try grants[0].int("n") == 1)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func applePackRefundClawsBackWhatIsLeftAndRecordsTheShortfall(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let token = try await client.signUpAndVerify(app, email: "refund@example.com")
            let user = try await app.userID(token: token)
            let now = app.clock.now()
            let pack = try fx.transaction(id: "8000", product: "com.yourapp.tokens.100", purchase: now, token: user)
            #expect(try await client.appleVerify(token, pack).json(VerifyBody.self).tokenBalance.purchasedTokens == 100)
            let key = try await app.apiKey(["ledger:write"])
            let spend = try await client.ledger(
                "/api/ledger/spend", key: key, idempotencyKey: "s1", json: #"{"userId":"\#(user)","amount":63,"reason":"generation"}"#)
            #expect(spend.status == .ok)
            let left = try await client.balance(token).purchasedTokens
            // Half refunded first (revocationPercentage 50000 = 50%), then the rest: cumulative, never below zero.
            let half = try fx.transaction(id: "8000", product: "com.yourapp.tokens.100", purchase: now, token: user, revocationPercentage: 50000, revoked: now)
            #expect(try await client.appleNotify(try fx.notification("REFUND", signed: now.addingTimeInterval(1), transaction: half)).status == .ok)
            let afterHalf = try await client.balance(token).purchasedTokens
            #expect(afterHalf == max(0, left - 50))
            let full = try fx.transaction(id: "8000", product: "com.yourapp.tokens.100", purchase: now, token: user, revocationPercentage: 100000, revoked: now)
            #expect(try await client.appleNotify(try fx.notification("REFUND", signed: now.addingTimeInterval(2), transaction: full)).status == .ok)
            #expect(try await client.balance(token).purchasedTokens == 0)
            let grant = try #require(try await app.rows("SELECT clawed_tokens, shortfall_tokens FROM billing_grants WHERE source_id = '8000'").first)
            #expect(try grant.int("clawed_tokens") == Int64(left) && grant.int("shortfall_tokens") == 100 - Int64(left))
            // Reversal gives back exactly what was taken.
            #expect(try await client.appleNotify(try fx.notification("REFUND_REVERSED", signed: now.addingTimeInterval(3), transaction: pack)).status == .ok)
            #expect(try await client.balance(token).purchasedTokens == left)
            // The ledger still balances.
            let admin = try await app.apiKey(["admin"])
            let verify = try await client.get("/api/admin/ledger/verify", token: admin)
            #expect(verify.status == .ok && verify.text.contains(#""ok":true"#))
        }
    }

    @Test(arguments: TestDatabase.engines)
    func concurrentDeliveriesOfOnePurchaseGrantOnce(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let token = try await client.signUpAndVerify(app, email: "race@example.com")
            let user = try await app.userID(token: token)
            let now = app.clock.now()
            let txn = try fx.transaction(id: "6000", product: "com.yourapp.tokens.25", purchase: now, token: user)
            let notification = try fx.notification("ONE_TIME_CHARGE", uuid: "race-1", signed: now, transaction: txn)
            let other = try fx.notification("ONE_TIME_CHARGE", uuid: "race-2", signed: now, transaction: txn)  // Apple resends under a new UUID
            let checkout = stripeEvent("evt_race", "checkout.session.completed", created: now,
                #"{"id":"cs_race","object":"checkout.session","mode":"payment","payment_status":"paid","client_reference_id":"\#(user)","payment_intent":"pi_race","metadata":{"priceId":"price_tokens_100"}}"#)
            let statuses = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                for i in 0..<12 {
                    group.addTask {
                        switch i % 4 {
                        case 0: try await client.appleNotify(notification).status
                        case 1: try await client.appleNotify(other).status
                        case 2: try await client.appleVerify(token, txn).status
                        default: try await client.stripe(checkout, at: now).status
                        }
                    }
                }
                return try await group.reduce(into: [HTTPResponse.Status]()) { $0.append($1) }
            }
            #expect(statuses.allSatisfy { $0 == .ok }, "\(statuses)")
            #expect(try await client.balance(token).purchasedTokens == 125)
            let grants = try await app.rows("SELECT COUNT(*) AS n FROM billing_grants")
            #expect(try grants[0].int("n") == 2)
            let applied = try await app.rows("SELECT COUNT(*) AS n FROM billing_events WHERE verdict = 'applied'")
            #expect(try applied[0].int("n") == 2)
            // Family Sharing withdrawn (REVOKE) takes the pack back, once.
            let revoke = try fx.notification("REVOKE", signed: now.addingTimeInterval(5), transaction: txn)
            #expect(try await client.appleNotify(revoke).json(ReceivedBody.self).outcome == "applied")
            #expect(try await client.balance(token).purchasedTokens == 100)
            // OFFER_REDEEMED for a subscription applies its transaction like SUBSCRIBED.
            let offer = try fx.transaction(id: "6100", product: "com.yourapp.basic.monthly", purchase: now, expires: now.addingTimeInterval(30 * 86400), token: user)
            #expect(try await client.appleNotify(try fx.notification("OFFER_REDEEMED", signed: now.addingTimeInterval(6), transaction: offer))
                .json(ReceivedBody.self).outcome == "applied")
            #expect(try await client.subscription(token).planId == "basic_monthly")
        }
    }

    @Test(arguments: TestDatabase.engines)
    func stripeWebhooksAreSignedDeduplicatedAndOrderTolerant(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            var token = try await client.signUpAndVerify(app, email: "stripe@example.com")
            let user = try await app.userID(token: token)
            let now = app.clock.now()
            // A refund that arrives before its checkout: stored, applied when the checkout completes.
            let earlyRefund = stripeEvent("evt_r0", "charge.refunded", created: now,
                #"{"id":"ch_1","object":"charge","amount":1499,"amount_refunded":1499,"payment_intent":"pi_2"}"#)
            #expect(try await client.stripe(earlyRefund, at: now).json(ReceivedBody.self).outcome == "unmatched")

            // Token pack checkout: granted once, whatever the retries.
            let checkout = stripeEvent("evt_1", "checkout.session.completed", created: now,
                #"{"id":"cs_1","object":"checkout.session","mode":"payment","payment_status":"paid","client_reference_id":"\#(user)","customer":"cus_1","payment_intent":"pi_1","metadata":{"priceId":"price_tokens_25"}}"#)
            let first = try await client.stripe(checkout, at: now)
            #expect(try first.status == .ok && (first.json(ReceivedBody.self).outcome) == "applied")
            #expect(try await client.stripe(checkout, at: now.addingTimeInterval(60)).json(ReceivedBody.self).outcome == "duplicate")
            #expect(try await client.balance(token).purchasedTokens == 25)

            // Signature failures: 400, nothing applied, nothing stored.
            let other = stripeEvent("evt_2", "checkout.session.completed", created: now,
                #"{"id":"cs_2","object":"checkout.session","mode":"payment","payment_status":"paid","client_reference_id":"\#(user)","payment_intent":"pi_2","metadata":{"priceId":"price_tokens_100"}}"#)
            let wrong = try await client.stripe(other, at: now, secret: "whsec_someone_else_000000")
            #expect(try wrong.status == .badRequest && (wrong.problem().code) == "invalid_signature")
            let stale = try await client.stripe(other, at: now.addingTimeInterval(-301))
            #expect(try stale.status == .badRequest && (stale.problem().detail.contains("old")))
            #expect(try await client.stripe(other, at: now.addingTimeInterval(301)).status == .badRequest)
            let noHeader = try await client.post("/api/webhooks/stripe", json: other)
            #expect(try noHeader.status == .badRequest && (noHeader.problem().detail.contains("Stripe-Signature")))
            #expect(try await client.balance(token).purchasedTokens == 25)
            // The rotated-out secret still verifies (comma-separated secrets).
            #expect(try await client.stripe(other, at: now, secret: "whsec_retired_secret_000000").json(ReceivedBody.self).outcome == "applied")
            // …and the early refund of pi_2 was applied right after: 100 granted, 100 clawed back.
            #expect(try await client.balance(token).purchasedTokens == 25)
            let replayed = try await app.rows("SELECT verdict FROM billing_events WHERE external_id = 'evt_r0'")
            #expect(try replayed.first?.string("verdict") == "applied")

            // Partial refunds of the first pack are cumulative: 40% then 100%.
            let partial = stripeEvent("evt_3", "charge.refunded", created: now.addingTimeInterval(10),
                #"{"id":"ch_2","object":"charge","amount":499,"amount_refunded":200,"payment_intent":"pi_1"}"#)
            #expect(try await client.stripe(partial, at: now).json(ReceivedBody.self).outcome == "applied")
            #expect(try await client.balance(token).purchasedTokens == 15)  // 25 × 200/499 = 10 clawed
            let rest = stripeEvent("evt_4", "charge.refunded", created: now.addingTimeInterval(20),
                #"{"id":"ch_2","object":"charge","amount":499,"amount_refunded":499,"payment_intent":"pi_1"}"#)
            #expect(try await client.stripe(rest, at: now).json(ReceivedBody.self).outcome == "applied")
            #expect(try await client.balance(token).purchasedTokens == 0)

            // Subscription checkout starts the plan; the first invoice adds nothing; a cycle invoice renews once.
            let subCheckout = stripeEvent("evt_5", "checkout.session.completed", created: now.addingTimeInterval(30),
                #"{"id":"cs_3","object":"checkout.session","mode":"subscription","payment_status":"paid","client_reference_id":"\#(user)","customer":"cus_1","subscription":"sub_1","invoice":"in_0","metadata":{"priceId":"price_basic_monthly"}}"#)
            #expect(try await client.stripe(subCheckout, at: now).json(ReceivedBody.self).outcome == "applied")
            let started = try await client.subscription(token)
            #expect(started.planId == "basic_monthly" && started.isEntitled)
            #expect(try await client.balance(token).subscriptionTokens == 50)
            let firstInvoice = stripeEvent("evt_6", "invoice.paid", created: now.addingTimeInterval(29),
                #"{"id":"in_0","object":"invoice","billing_reason":"subscription_create","customer":"cus_1","subscription":"sub_1","lines":{"data":[{"price":{"id":"price_basic_monthly"},"period":{"start":\#(Int64(now.timeIntervalSince1970)),"end":\#(Int64(now.timeIntervalSince1970) + 2_592_000)}}]}}"#)
            #expect(try await client.stripe(firstInvoice, at: now).json(ReceivedBody.self).outcome == "acknowledged")
            let periodStart = Int64(now.timeIntervalSince1970) + 2_592_000
            app.clock.set(Date(timeIntervalSince1970: Double(periodStart + 60)))
            token = try await client.signIn("stripe@example.com", "correct horse battery").json(SeedSignInResponse.self).session.token  // sessions idle out
            let later = app.clock.now()
            // Basil shape: subscription under parent.subscription_details, price under pricing.price_details.
            let cycle = stripeEvent("evt_7", "invoice.paid", created: Date(timeIntervalSince1970: Double(periodStart)),
                #"{"id":"in_1","object":"invoice","billing_reason":"subscription_cycle","customer":"cus_1","parent":{"subscription_details":{"subscription":"sub_1"}},"lines":{"data":[{"pricing":{"price_details":{"price":"price_basic_monthly"}},"period":{"start":\#(periodStart),"end":\#(periodStart + 2_592_000)}}]}}"#)
            // A newer subscription update (cancel at period end) arrives first; the paid period still grants once.
            let cancel = stripeEvent("evt_8", "customer.subscription.updated", created: Date(timeIntervalSince1970: Double(periodStart + 5)),
                #"{"id":"sub_1","object":"subscription","status":"active","cancel_at_period_end":true,"customer":"cus_1","items":{"data":[{"price":{"id":"price_basic_monthly"},"current_period_end":\#(periodStart + 2_592_000)}]}}"#)
            #expect(try await client.stripe(cancel, at: later).json(ReceivedBody.self).outcome == "applied")
            #expect(try await client.stripe(cycle, at: later).json(ReceivedBody.self).outcome == "stale")
            #expect(try await client.stripe(cycle, at: later).json(ReceivedBody.self).outcome == "duplicate")
            #expect(try await client.balance(token).subscriptionTokens == 100)
            #expect(try await client.subscription(token).willRenew == false)
            // Deleted → back to free.
            let deleted = stripeEvent("evt_9", "customer.subscription.deleted", created: Date(timeIntervalSince1970: Double(periodStart + 10)),
                #"{"id":"sub_1","object":"subscription","status":"canceled","customer":"cus_1"}"#)
            #expect(try await client.stripe(deleted, at: later).json(ReceivedBody.self).outcome == "applied")
            #expect(try await client.subscription(token).isEntitled == false)
            // Unhandled types are stored and acknowledged; malformed events are refused.
            #expect(try await client.stripe(stripeEvent("evt_10", "customer.created", created: later, #"{"id":"cus_2"}"#), at: later)
                .json(ReceivedBody.self).outcome == "acknowledged")
            #expect(try await client.stripe(#"{"not":"an event"}"#, at: later).status == .badRequest)
            let admin = try await app.apiKey(["admin"])
            let mine = try await client.get("/api/admin/billing/events?userId=\(user)&provider=stripe&limit=200", token: admin).json(EventsBody.self)
            #expect(mine.events.count >= 9 && mine.events.allSatisfy { $0.provider == "stripe" && $0.userId == user })
            let verify = try await client.get("/api/admin/ledger/verify", token: admin)
            #expect(verify.status == .ok && verify.text.contains(#""ok":true"#))
        }
    }
}
