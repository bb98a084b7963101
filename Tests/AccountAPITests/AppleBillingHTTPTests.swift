import Auth
import Billing
import Clock
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

@Suite("Billing over HTTP: Apple")
struct AppleBillingHTTPTests {
    /// A verify whose session was revoked (or whose account was erased) after the request was authenticated, while the
    /// transaction was being verified, binds and grants nothing: the session is checked again first in the transaction
    /// (before, the purchase was bound to the erased account for good and its tokens granted to it).
    @Test(arguments: TestDatabase.engines)
    func aVerifyWhoseSessionEndedMeanwhileChangesNothing(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let token = try await client.signUpAndVerify(app, email: "late-verify@example.com")
            let user = try await app.userID(token: token)
            let session = try await app.dependencies.auth.authenticate(token: token, logger: Logger(label: "test"))
            let pack = try fx.transaction(id: "7001", product: "com.yourapp.tokens.25", purchase: app.clock.now(), token: user)
            #expect(try await client.send(.delete, "/api/user/me", token: token, json: #"{"password":"correct horse battery"}"#).status == .noContent)
            await #expect(throws: (any Error).self) {
                _ = try await app.dependencies.billing.verifyApplePurchase(
                    pack, userID: user, canMakePurchases: true, authorise: app.dependencies.auth.stillLive(session), logger: Logger(label: "test"))
            }
            #expect(try await app.rows("SELECT user_id FROM billing_accounts WHERE external_id = '7001'").isEmpty)
            #expect(try await app.rows("SELECT source_id FROM billing_grants WHERE source_id = '7001'").isEmpty)
        }
    }

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
            #expect(
                body.outcome == "applied" && body.environment == "Sandbox" && body.tokenBalance.purchasedTokens == 25
                    && body.tokenBalance.totalTokens == 28)
            let again = try await client.appleVerify(token, pack).json(VerifyBody.self)
            #expect(again.outcome == "duplicate" && again.tokenBalance.purchasedTokens == 25)
            // Signed dates at Int64's ends (or past 2100) once stopped the process on their way to an answer: every date of
            // a payload is checked like its signing time, 400 and nothing applied.
            for edge: Int64 in [.max, .min, 4_102_444_800_001, -1] {
                let far = Date(epochMilliseconds: edge)
                for jws in [
                    try fx.transaction(id: "e\(edge)", product: "com.yourapp.pro.monthly", purchase: far, token: user),
                    try fx.transaction(id: "f\(edge)", product: "com.yourapp.pro.monthly", purchase: now, expires: far, token: user),
                ] {
                    let refused = try await client.appleVerify(token, jws)
                    #expect(try refused.status == .badRequest && refused.problem().detail.contains("out of range"), "\(edge)")
                }
            }
            #expect(try await client.subscription(token).planId == "free")
            // A subscription: the plan applies in the same response (no waiting for a notification).
            let sub = try fx.transaction(
                id: "2001", product: "com.yourapp.pro.monthly", purchase: now, expires: now.addingTimeInterval(30 * 86400), token: user)
            let subscribed = try await client.appleVerify(token, sub).json(VerifyBody.self)
            #expect(
                subscribed.subscription.planId == "pro_monthly" && subscribed.subscription.isEntitled && subscribed.subscription.status == "active")
            #expect(subscribed.tokenBalance.subscriptionTokens > 0)
            let periodTokens = subscribed.tokenBalance.subscriptionTokens
            #expect(try await client.appleVerify(token, sub).json(VerifyBody.self).tokenBalance.subscriptionTokens == periodTokens)

            // A profile that may not purchase can't verify purchases either.
            let kid = try await client.createProfile(token, #"{"name":"Kid","canMakePurchases":false,"canUseCustomContentTypes":false}"#)
            #expect(kid.status == .created)
            let kidID = try kid.json(ProfileBody.self).id
            #expect(try await client.send(.post, "/api/profiles/select", token: token, json: #"{"profileId":"\#(kidID)"}"#).status == .ok)
            let blocked = try await client.appleVerify(
                token, try fx.transaction(id: "1002", product: "com.yourapp.tokens.25", purchase: now, token: user))
            #expect(try blocked.status == .forbidden && blocked.problem().code == "purchase_not_allowed")
            #expect(try await client.balance(token).purchasedTokens == 25)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func applePurchasesStayWithTheirAccountAndRefusalsAreOnRecord(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let token = try await client.signUpAndVerify(app, email: "buyer@example.com")
            let user = try await app.userID(token: token)
            let now = app.clock.now()
            for id in ["1001", "1001"] {
                _ = try await client.appleVerify(token, try fx.transaction(id: id, product: "com.yourapp.tokens.25", purchase: now, token: user))
            }
            let sub = try fx.transaction(
                id: "2001", product: "com.yourapp.pro.monthly", purchase: now, expires: now.addingTimeInterval(30 * 86400), token: user)
            for _ in 0..<2 { #expect(try await client.appleVerify(token, sub).status == .ok) }
            // Another account can't take the purchase over, with or without an appAccountToken.
            let other = try await client.signUpAndVerify(app, email: "other@example.com")
            let otherUser = try await app.userID(token: other)
            let stolen = try await client.appleVerify(
                other,
                try fx.transaction(
                    id: "2002", original: "2001", product: "com.yourapp.pro.monthly",
                    purchase: now, expires: now.addingTimeInterval(30 * 86400), token: nil))
            #expect(stolen.status == .conflict)
            #expect(try stolen.problem().code == "purchase_bound_elsewhere")
            let mismatch = try await client.appleVerify(
                other, try fx.transaction(id: "3001", product: "com.yourapp.tokens.25", purchase: now, token: user))
            #expect(try mismatch.status == .forbidden && (mismatch.problem().code) == "account_mismatch")
            #expect(try await client.balance(other).purchasedTokens == 0)
            // Unknown products, revoked transactions and forged payloads are refused; nothing changes.
            let unknown = try await client.appleVerify(
                other, try fx.transaction(id: "4001", product: "com.other.thing", purchase: now, token: otherUser))
            #expect(try unknown.status == .badRequest && (unknown.problem().detail.contains("com.other.thing")))
            let revoked = try await client.appleVerify(
                other, try fx.transaction(id: "4002", product: "com.yourapp.tokens.25", purchase: now, token: otherUser, revoked: now))
            #expect(try revoked.status == .conflict && (revoked.problem().code) == "transaction_revoked")
            let forged = try AppleTestChain().sign(json: [
                "transactionId": "5", "originalTransactionId": "5", "bundleId": BillingFixture.bundle,
                "productId": "com.yourapp.tokens.500", "purchaseDate": BillingFixture.ms(now), "environment": "Sandbox", "appAccountToken": otherUser,
            ])
            let refused = try await client.appleVerify(other, forged)
            #expect(try refused.status == .badRequest && (refused.problem().code) == "invalid_signed_payload")
            let production = try await client.appleVerify(
                other, try fx.transaction(id: "4003", product: "com.yourapp.tokens.25", purchase: now, token: otherUser, environment: "Production"))
            #expect(try production.status == .badRequest && (production.problem().detail.contains("Production")))
            #expect(try await client.balance(other).purchasedTokens == 0)
            try await Self.refusalsAreOnRecord(client, app, buyer: user, token: token)
        }
    }

    /// Every verified attempt is on record for operators, refused ones too; payloads that fail verification are not
    /// stored (anyone can send them), only counted.
    static func refusalsAreOnRecord(_ client: some TestClientProtocol, _ app: TestApp, buyer user: String, token: String) async throws {
        let admin = try await app.apiKey(["admin"])
        let events = try await client.get("/api/admin/billing/events?provider=apple&limit=200", token: admin).json(EventsBody.self)
        #expect(events.events.contains { $0.outcome == "rejected" && $0.detail?.contains("com.other.thing") == true })
        #expect(!events.events.contains { $0.detail?.contains("not trusted") == true })
        // Two transactions, each verified twice: one record each (a repeated verify stored its JWS again, without bound).
        #expect(events.events.filter { $0.userId == user && $0.source == "verify" }.count == 2)
        let page = try await client.get("/api/admin/billing/events?limit=1", token: admin).json(EventsBody.self)
        let next = try await client.get("/api/admin/billing/events?limit=1&cursor=\(try #require(page.nextCursor))", token: admin).json(
            EventsBody.self)
        #expect(page.events.count == 1 && next.events.count == 1 && page.events[0].id != next.events[0].id)
        #expect(try await client.get("/api/admin/billing/events", token: token).status == .forbidden)
        #expect(try await client.get("/api/admin/billing/events?cursor=zzz", token: admin).status == .badRequest)
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
            var life = try await AppleLifecycle(client: client, app: app, fx: fx)
            let t1 = try await life.subscribeAndRenew()
            let t2 = try await life.changeRenewalAndPlan(after: t1)
            let t4 = try await life.billingTroubleAndRecovery(after: t2)
            try await life.refundReversalAndExpiry(at: t4)
            try await life.badNotificationsAreNotStored()
        }
    }

    @Test(arguments: TestDatabase.engines)
    func appleNotificationsForAnUnknownAccountApplyWhenThePurchaseIsVerified(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let token = try await client.signUpAndVerify(app, email: "later@example.com")
            let now = app.clock.now()
            // Bought outside the app (no appAccountToken): Apple's notification arrives first.
            let txn = try fx.transaction(
                id: "7000", product: "com.yourapp.pro.monthly", purchase: now, expires: now.addingTimeInterval(30 * 86400), token: nil)
            let early = try await client.appleNotify(try fx.notification("SUBSCRIBED", subtype: "INITIAL_BUY", signed: now, transaction: txn))
            #expect(try early.status == .ok && (early.json(ReceivedBody.self).outcome) == "unmatched")
            #expect(try await client.subscription(token).planId == "free")
            let renewalOff = try fx.notification(
                "DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_DISABLED", signed: now.addingTimeInterval(5), transaction: txn)
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

    /// A refund of a subscription the account has since replaced (another purchase chain, current now) takes back that
    /// purchase's month and leaves the current subscription alone; before, it was dropped as "another purchase".
    @Test(arguments: TestDatabase.engines)
    func aRefundOfAnEarlierPurchaseChainTakesBackItsMonth(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            var token = try await client.signUpAndVerify(app, email: "chains@example.com")
            let user = try await app.userID(token: token)
            let t0 = app.clock.now()
            let first = try fx.transaction(
                id: "7000", original: "7000", product: "com.yourapp.basic.monthly", purchase: t0, expires: t0.addingTimeInterval(86_400), token: user)
            #expect(try await client.appleVerify(token, first).json(VerifyBody.self).outcome == "applied")
            let t1 = t0.addingTimeInterval(2 * 86_400)
            app.clock.set(t1)
            token = try await client.signIn("chains@example.com", "correct horse battery").json(SeedSignInResponse.self).session.token
            let second = try fx.transaction(
                id: "7100", original: "7100", product: "com.yourapp.pro.monthly", purchase: t1, expires: t1.addingTimeInterval(30 * 86_400),
                token: user)
            #expect(try await client.appleVerify(token, second).json(VerifyBody.self).outcome == "applied")
            let before = try await client.balance(token).subscriptionTokens
            let refunded = try fx.transaction(
                id: "7000", original: "7000", product: "com.yourapp.basic.monthly", purchase: t0, expires: t0.addingTimeInterval(86_400), token: user,
                revoked: t1)
            let refund = try fx.notification("REFUND", signed: t1.addingTimeInterval(60), transaction: refunded)
            #expect(try await client.appleNotify(refund).json(ReceivedBody.self).outcome == "applied")
            #expect(before - (try await client.balance(token).subscriptionTokens) == 50)
            let now = try await client.subscription(token)
            #expect(now.planId == "pro_monthly" && now.isEntitled)
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
            let half = try fx.transaction(
                id: "8000", product: "com.yourapp.tokens.100", purchase: now, token: user, revocationPercentage: 50000, revoked: now)
            #expect(try await client.appleNotify(try fx.notification("REFUND", signed: now.addingTimeInterval(1), transaction: half)).status == .ok)
            let afterHalf = try await client.balance(token).purchasedTokens
            #expect(afterHalf == max(0, left - 50))
            let full = try fx.transaction(
                id: "8000", product: "com.yourapp.tokens.100", purchase: now, token: user, revocationPercentage: 100000, revoked: now)
            #expect(try await client.appleNotify(try fx.notification("REFUND", signed: now.addingTimeInterval(2), transaction: full)).status == .ok)
            #expect(try await client.balance(token).purchasedTokens == 0)
            let grant = try #require(try await app.rows("SELECT clawed_tokens, shortfall_tokens FROM billing_grants WHERE source_id = '8000'").first)
            #expect(try grant.int("clawed_tokens") == Int64(left) && grant.int("shortfall_tokens") == 100 - Int64(left))
            // Reversal gives back exactly what was taken.
            #expect(
                try await client.appleNotify(try fx.notification("REFUND_REVERSED", signed: now.addingTimeInterval(3), transaction: pack)).status
                    == .ok)
            #expect(try await client.balance(token).purchasedTokens == left)
            // The ledger still balances.
            let admin = try await app.apiKey(["admin"])
            let verify = try await client.get("/api/admin/ledger/verify", token: admin)
            #expect(verify.status == .ok && verify.text.contains(#""ok":true"#))
        }
    }

    /// A refund that arrives before its purchase was ever granted here keeps the purchase from being granted later by a
    /// transaction signed before the refund (a reviewer kept one, had the purchase refunded, then verified it); a
    /// reversed refund grants it after all.
    @Test(arguments: TestDatabase.engines)
    func aRefundBeforeThePurchaseWasGrantedKeepsItFromBeingGranted(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let token = try await client.signUpAndVerify(app, email: "early-refund@example.com")
            let user = try await app.userID(token: token)
            let now = app.clock.now()
            let kept = try fx.transaction(id: "8100", product: "com.yourapp.tokens.100", purchase: now, token: user)
            let refunded = try fx.transaction(
                id: "8100", product: "com.yourapp.tokens.100", purchase: now, token: user, revocationPercentage: 100000, revoked: now)
            #expect(
                try await client.appleNotify(try fx.notification("REFUND", signed: now.addingTimeInterval(1), transaction: refunded)).status == .ok)
            #expect(try await client.appleVerify(token, kept).status == .ok)
            #expect(try await client.balance(token).purchasedTokens == 0, "the kept pre-refund transaction grants nothing")
            #expect(
                try await client.appleNotify(try fx.notification("REFUND_REVERSED", signed: now.addingTimeInterval(2), transaction: kept)).status
                    == .ok)
            #expect(try await client.balance(token).purchasedTokens == 100)
            let verify = try await client.get("/api/admin/ledger/verify", token: try await app.apiKey(["admin"]))
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
            let checkout = stripeEvent(
                "evt_race", "checkout.session.completed", created: now,
                #"{"id":"cs_race","object":"checkout.session","mode":"payment","payment_status":"paid","client_reference_id":"\#(user)","payment_intent":"pi_race","metadata":{"priceId":"price_tokens_100"}}"#
            )
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
            let offer = try fx.transaction(
                id: "6100", product: "com.yourapp.basic.monthly", purchase: now, expires: now.addingTimeInterval(30 * 86400), token: user)
            #expect(
                try await client.appleNotify(try fx.notification("OFFER_REDEEMED", signed: now.addingTimeInterval(6), transaction: offer))
                    .json(ReceivedBody.self).outcome == "applied")
            #expect(try await client.subscription(token).planId == "basic_monthly")
        }
    }
}

/// The life of one Apple subscription, told by its notifications, step by step.
struct AppleLifecycle {
    let client: any TestClientProtocol
    let app: TestApp
    let fx: BillingFixture
    let user: String
    var token: String
    let t0: Date
    let day: TimeInterval = 86400

    init(client: any TestClientProtocol, app: TestApp, fx: BillingFixture) async throws {
        (self.client, self.app, self.fx) = (client, app, fx)
        token = try await client.signUpAndVerify(app, email: "life@example.com")
        user = try await app.userID(token: token)
        t0 = app.clock.now()
    }

    func txn(_ id: String, _ product: String, _ start: Date, days: Double = 30) throws -> String {
        try fx.transaction(id: id, original: "9000", product: product, purchase: start, expires: start.addingTimeInterval(days * day), token: user)
    }

    func outcome(_ notification: String) async throws -> String { try await client.appleNotify(notification).json(ReceivedBody.self).outcome }

    /// Sessions idle out over the months of the story: sign in again at `date`.
    mutating func signIn(at date: Date) async throws {
        app.clock.set(date)
        token = try await client.signIn("life@example.com", "correct horse battery").json(SeedSignInResponse.self).session.token
    }

    /// TEST is acknowledged; SUBSCRIBED starts the plan once; DID_RENEW a new period with its tokens once.
    mutating func subscribeAndRenew() async throws -> Date {
        let test = try await client.appleNotify(try fx.notification("TEST", signed: t0, transaction: nil))
        #expect(try test.status == .ok && (test.json(ReceivedBody.self).outcome) == "acknowledged")
        let subscribed = try fx.notification(
            "SUBSCRIBED", subtype: "INITIAL_BUY", uuid: "n-1", signed: t0, transaction: try txn("9000", "com.yourapp.basic.monthly", t0))
        #expect(try await outcome(subscribed) == "applied")
        #expect(try await outcome(subscribed) == "duplicate")
        #expect(try await client.subscription(token).planId == "basic_monthly")
        #expect(try await client.balance(token).subscriptionTokens == 50)
        // The device posting the same transaction is a duplicate of the notification.
        #expect(try await client.appleVerify(token, try txn("9000", "com.yourapp.basic.monthly", t0)).json(VerifyBody.self).outcome == "duplicate")
        let t1 = t0.addingTimeInterval(30 * day)
        try await signIn(at: t1.addingTimeInterval(60))
        let renew = try fx.notification("DID_RENEW", uuid: "n-2", signed: t1, transaction: try txn("9001", "com.yourapp.basic.monthly", t1))
        #expect(try await outcome(renew) == "applied")
        #expect(try await outcome(renew) == "duplicate")
        #expect(try await client.balance(token).subscriptionTokens == 100)  // 50 rolled over (max 50) + 50
        return t1
    }

    /// Auto-renew off, then a late older notification (stale, never applied); a downgrade pends, an upgrade applies now.
    func changeRenewalAndPlan(after t1: Date) async throws -> Date {
        let off = try fx.notification(
            "DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_DISABLED", uuid: "n-3", signed: t1.addingTimeInterval(20),
            transaction: try txn("9001", "com.yourapp.basic.monthly", t1))
        #expect(try await outcome(off) == "applied")
        #expect(try await client.subscription(token).willRenew == false)
        let lateOn = try fx.notification(
            "DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_ENABLED", uuid: "n-old", signed: t1.addingTimeInterval(10),
            transaction: try txn("9001", "com.yourapp.basic.monthly", t1))
        #expect(try await outcome(lateOn) == "stale")
        #expect(try await client.subscription(token).willRenew == false)
        let down = try fx.notification(
            "DID_CHANGE_RENEWAL_PREF", subtype: "DOWNGRADE", uuid: "n-4", signed: t1.addingTimeInterval(30),
            transaction: try txn("9001", "com.yourapp.basic.monthly", t1),
            renewal: try fx.renewal(original: "9000", autoRenewProduct: "com.yourapp.basic.yearly", signed: t1.addingTimeInterval(30)))
        #expect(try await outcome(down) == "applied")
        let pending = try await client.subscription(token)
        #expect(pending.planId == "basic_monthly" && pending.pendingPlanId == "basic_yearly")
        let t2 = t1.addingTimeInterval(40)
        let up = try fx.notification(
            "DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE", uuid: "n-5", signed: t2, transaction: try txn("9002", "com.yourapp.max.monthly", t2))
        #expect(try await outcome(up) == "applied")
        let upgraded = try await client.subscription(token)
        #expect(upgraded.planId == "max_monthly" && upgraded.isEntitled)
        return t2
    }

    /// Grace keeps access until its end; after it, no access; a billing recovery restores it.
    mutating func billingTroubleAndRecovery(after t2: Date) async throws -> Date {
        let t3 = t2.addingTimeInterval(30 * day)
        try await signIn(at: t3.addingTimeInterval(60))
        let graceEnd = t3.addingTimeInterval(16 * day)
        let fail = try fx.notification(
            "DID_FAIL_TO_RENEW", subtype: "GRACE_PERIOD", uuid: "n-6", signed: t3,
            transaction: try txn("9002", "com.yourapp.max.monthly", t2),
            renewal: try fx.renewal(original: "9000", autoRenewProduct: "com.yourapp.max.monthly", grace: graceEnd, signed: t3))
        #expect(try await outcome(fail) == "applied")
        let grace = try await client.subscription(token)
        #expect(grace.status == "grace" && grace.isEntitled)
        try await signIn(at: graceEnd.addingTimeInterval(60))
        let expiredGrace = try fx.notification(
            "GRACE_PERIOD_EXPIRED", uuid: "n-7", signed: graceEnd, transaction: try txn("9002", "com.yourapp.max.monthly", t2))
        #expect(try await outcome(expiredGrace) == "applied")
        #expect(try await client.subscription(token).isEntitled == false)
        let t4 = graceEnd.addingTimeInterval(day)
        try await signIn(at: t4.addingTimeInterval(60))
        let recovered = try fx.notification(
            "DID_RENEW", subtype: "BILLING_RECOVERY", uuid: "n-8", signed: t4, transaction: try txn("9003", "com.yourapp.max.monthly", t4))
        #expect(try await outcome(recovered) == "applied")
        #expect(try await client.subscription(token).isEntitled)
        return t4
    }

    /// A refund ends access and claws the period's tokens back (never below zero); its reversal restores both; then expiry;
    /// then a late refund of an earlier month.
    func refundReversalAndExpiry(at t4: Date) async throws {
        let before = try await client.balance(token).subscriptionTokens
        let refund = try fx.notification(
            "REFUND", uuid: "n-9", signed: t4.addingTimeInterval(100), transaction: try txn("9003", "com.yourapp.max.monthly", t4))
        #expect(try await outcome(refund) == "applied")
        #expect(try await outcome(refund) == "duplicate")
        #expect(try await client.subscription(token).isEntitled == false)
        #expect(before - (try await client.balance(token).subscriptionTokens) > 0)
        let clawed = try await app.rows("SELECT clawed_tokens FROM subscription_events WHERE kind = 'refund' AND user_id = ?", [user]).first?
            .optionalInt("clawed_tokens")
        #expect(clawed.map { $0 > 0 } == true, "the clawback is an amount in its own column")
        let reversed = try fx.notification(
            "REFUND_REVERSED", uuid: "n-10", signed: t4.addingTimeInterval(200), transaction: try txn("9003", "com.yourapp.max.monthly", t4))
        #expect(try await outcome(reversed) == "applied")
        #expect(try await client.balance(token).subscriptionTokens == before)
        #expect(try await client.subscription(token).isEntitled)
        let expired = try fx.notification(
            "EXPIRED", subtype: "VOLUNTARY", uuid: "n-11", signed: t4.addingTimeInterval(300),
            transaction: try txn("9003", "com.yourapp.max.monthly", t4))
        #expect(try await outcome(expired) == "applied")
        #expect(try await client.subscription(token).isEntitled == false)
        let price = try fx.notification(
            "PRICE_INCREASE", subtype: "PENDING", uuid: "n-12", signed: t4.addingTimeInterval(400),
            transaction: try txn("9003", "com.yourapp.max.monthly", t4))
        #expect(try await outcome(price) == "acknowledged")
        // A refund of an earlier month, signed before the newer events (so stale): that month's tokens still go back,
        // once (before, a stale refund was lost).
        let held = try await client.balance(token).subscriptionTokens
        let t1 = t0.addingTimeInterval(30 * day)
        let lateRefund = try fx.notification(
            "REFUND", uuid: "n-13", signed: t1.addingTimeInterval(50), transaction: try txn("9001", "com.yourapp.basic.monthly", t1))
        #expect(held >= 50)
        #expect(try await outcome(lateRefund) == "stale")
        #expect(held - (try await client.balance(token).subscriptionTokens) == 50)
        #expect(try await client.subscription(token).isEntitled == false)
    }

    /// Bad notifications: 400, nothing applied, nothing stored (anyone can send them).
    func badNotificationsAreNotStored() async throws {
        let foreign = try AppleTestChain(rootName: "Elsewhere")
        let forged =
            #"{"signedPayload":"\#(try foreign.sign(json: ["notificationType": "SUBSCRIBED", "notificationUUID": "x", "signedDate": 1, "data": ["bundleId": BillingFixture.bundle, "environment": "Sandbox"] as [String: any Sendable]]))"}"#
        let rejected = try await client.appleNotify(forged)
        #expect(try rejected.status == .badRequest && (rejected.problem().code) == "invalid_signed_payload")
        #expect(try await client.appleNotify(#"{"nope":1}"#).status == .badRequest)
        // A signing time past the year 9999 (or before year 0) once trapped in swift-certificates: refused before it.
        for signedDate: Int64 in [253_402_300_800_000, -62_167_219_200_001, .max, .min] {
            let payload: [String: any Sendable] = [
                "notificationType": "SUBSCRIBED", "notificationUUID": "x", "signedDate": signedDate,
                "data": ["bundleId": BillingFixture.bundle, "environment": "Sandbox"] as [String: any Sendable],
            ]
            let answer = try await client.appleNotify(#"{"signedPayload":"\#(try foreign.sign(json: payload))"}"#)
            #expect(try answer.status == .badRequest && answer.problem().code == "invalid_signed_payload")
        }
        // Found by schemathesis: a NUL byte in a rejected body is a 400, not a 500.
        #expect(try await client.appleNotify("\u{0}").status == .badRequest)
        let stored = try await app.rows(
            "SELECT verdict, COUNT(*) AS n FROM billing_events WHERE provider = 'apple' AND source = 'notification' GROUP BY verdict")
        let counts = Dictionary(uniqueKeysWithValues: try stored.map { (try $0.string("verdict"), try $0.int("n")) })
        #expect(counts["rejected"] == nil && counts["duplicate"] == 3 && counts["stale"] == 2)
    }
}
