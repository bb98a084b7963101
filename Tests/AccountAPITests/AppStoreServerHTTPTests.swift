import AppStoreServer
import AsyncHTTPClient
import Billing
import Clock
import Crypto
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import NIOCore
import Storage
import Synchronization
import TestSupport
import Testing

@testable import AccountAPI

/// The App Store Server API against a local mock of Apple's (our own key; the mock checks every token), on both engines.
@Suite("App Store Server API")
struct AppStoreServerHTTPTests {
    static let logger = Logger(label: "app-store-test")

    final class Sleeps: Sendable { let values = Mutex<[Double]>([]) }

    static func client(
        _ mock: AppStoreMock, _ base: String, key: String? = nil, slept: Sleeps? = nil, timeout: Double = 10, attempts: Int = 4
    ) async throws -> AppStoreServerClient {
        var settings = AppStoreServerSettings(
            keyID: AppStoreMock.keyID, issuerID: AppStoreMock.issuerID, bundleID: BillingFixture.bundle, privateKeyPEM: key ?? mock.keyPEM,
            baseURL: base)
        settings.backoffSeconds = 0.01
        settings.timeoutSeconds = timeout
        settings.attempts = attempts
        return try await AppStoreServerClient(
            settings: settings, http: HTTPClient.shared, now: { Date() }, sleep: { seconds in slept?.values.withLock { $0.append(seconds) } })
    }

    /// Each call with its token; 429 and 5xx retried with backoff (Retry-After honoured), then given up; Apple's own
    /// refusals not retried; a token signed with another key refused by the mock.
    @Test func everyCallRetriesAndGivesUp() async throws {
        let fx = try BillingFixture()
        let mock = AppStoreMock(bundleID: BillingFixture.bundle)
        let now = Date()
        let first = try fx.transaction(
            id: "h1", product: "com.yourapp.pro.monthly", purchase: now, expires: now.addingTimeInterval(86400), token: nil)
        let second = try fx.transaction(id: "h2", original: "h1", product: "com.yourapp.pro.monthly", purchase: now, expires: now, token: nil)
        mock.history.withLock { $0["h1"] = [first, second] }
        try await mock.run { base in
            let slept = Sleeps()
            let client = try await Self.client(mock, base, slept: slept)
            let page = try await client.transactionHistory("h1", logger: Self.logger)
            #expect(page.signedTransactions == [first] && page.hasMore == true && page.revision == "2")
            #expect(try await client.transactionHistory("h1", revision: "2", logger: Self.logger).signedTransactions == [second])
            #expect(
                try await client.subscriptionStatuses("h1", logger: Self.logger).data.first?.lastTransactions.first?.signedTransactionInfo == second)
            #expect(try await client.refundHistory("h1", logger: Self.logger).signedTransactions.isEmpty)
            #expect(try await client.lookUpOrder("h1", logger: Self.logger).status == 0)
            #expect(try await client.extendRenewalDate("h1", days: 7, reason: 3, requestID: "r-1", logger: Self.logger).success)
            let info = ConsumptionInformation(
                customerConsented: true, sampleContentProvided: false, deliveryStatus: "DELIVERED", consumptionPercentage: 50_000,
                refundPreference: nil)
            try await client.sendConsumption("h1", info, logger: Self.logger)
            #expect(mock.consumption.withLock { $0.last?.1.consumptionPercentage } == 50_000)
            // 429 (Retry-After: 0) and 503, then an answer: three tries, two waits.
            mock.script.withLock { $0 = [429, 503] }
            #expect(try await client.refundHistory("h1", logger: Self.logger).signedTransactions.isEmpty)
            #expect(slept.values.withLock { $0 } == [0, 0.02])
            // Four 500s: given up after four tries.
            mock.script.withLock { $0 = [500, 500, 500, 500] }
            await #expect(throws: AppStoreServerError.unavailable("Apple answered 500 after 4 tries")) {
                try await client.refundHistory("h1", logger: Self.logger)
            }
            // Apple's refusal (400) is not retried.
            mock.script.withLock { $0 = [400, 500] }
            let calls = mock.calls.withLock { $0.count }
            await #expect(throws: AppStoreServerError.self) { try await client.refundHistory("h1", logger: Self.logger) }
            #expect(mock.calls.withLock { $0.count } == calls + 1)
            mock.script.withLock { $0 = [] }
            // Another key: the mock refuses the token.
            let stranger = try await Self.client(mock, base, key: P256.Signing.PrivateKey().pemRepresentation)
            await #expect(throws: AppStoreServerError.self) { try await stranger.lookUpOrder("h1", logger: Self.logger) }
            #expect(mock.refusedTokens.withLock { $0 } == 1)
            // Apple unreachable (a refused port): every try of the call ends within twice one try's timeout (1 s), where
            // twenty tries of 0.5 s each would take 10 s: the bound leaves a loaded machine room and still tells them apart.
            let unreachable = try await Self.client(mock, "http://127.0.0.1:9", timeout: 0.5, attempts: 20)
            let started = ContinuousClock.now
            await #expect(throws: AppStoreServerError.self) { try await unreachable.lookUpOrder("h1", logger: Self.logger) }
            #expect(ContinuousClock.now - started < .seconds(5))
        }
    }

    static func configure(_ fx: BillingFixture, _ mock: AppStoreMock, _ base: String) throws -> @Sendable (inout AppConfig) -> Void {
        let key = try ScratchFile(mock.keyPEM, prefix: "apple-api-", suffix: ".p8")
        let billing = fx.configure
        return { config in
            billing(&config)
            config.appleAPI = AppleAPISettings(
                keyID: AppStoreMock.keyID, issuerID: AppStoreMock.issuerID, privateKeyPath: key.path, baseURL: base,
                offerKeyID: AppStoreMock.keyID, offerKeyPath: key.path)
            // The tests answer consumption requests themselves: the app's job (every 10 s by default) would race them
            // whenever a loaded machine stretches a test past its first poll.
            config.appleAPI?.pollSeconds = 3600
        }
    }

    struct SignedIn: Decodable { let session: Session; struct Session: Decodable { let token: String } }
    struct Consent: Decodable { let appleConsumptionData: Bool }
    struct Reconciled: Decodable { let chains: Int; let transactions: Int; let repairs: [String] }
    struct Offer: Decodable { let keyIdentifier: String; let nonce: String; let timestamp: Int64; let signature: String; let appAccountToken: String }

    /// CONSUMPTION_REQUEST: queued by the notification, answered by the worker from the ledger — nothing without consent;
    /// with it, what each purchase's tokens actually lost to spends (oldest purchase first), the preference by rule.
    @Test(arguments: Engine.allCases)
    func consumptionRequestsAreAnsweredFromTheLedger(engine: Engine) async throws {
        let fx = try BillingFixture()
        let mock = AppStoreMock(bundleID: BillingFixture.bundle)
        try await mock.run { base in
            try await TestApp.run(engine, configure: try Self.configure(fx, mock, base)) { client, app in
                let token = try await client.signUpAndVerify(app, email: "refund@example.com")
                let userID = try await app.userID(token: token)
                let now = app.clock.now()
                for id in ["c1", "c2"] {
                    let jws = try fx.transaction(id: id, product: "com.yourapp.tokens.100", purchase: now, token: userID)
                    #expect(try await client.appleVerify(token, jws).status == .ok)
                    app.clock.advance(seconds: 1)
                }
                // Welcome tokens (3) go first, then the oldest purchase: 3 + 130 spends leave c1 spent, c2 30 % spent.
                let key = try await app.apiKey(["ledger:write"])
                let spend = try await client.ledger(
                    "/api/ledger/spend", key: key, idempotencyKey: "s1", json: #"{"userId":"\#(userID)","amount":133,"reason":"generation"}"#)
                #expect(spend.status == .ok)
                #expect(try await client.get("/api/user/consent", token: token).json(Consent.self).appleConsumptionData == false)
                let c2 = try fx.transaction(id: "c2", product: "com.yourapp.tokens.100", purchase: now, token: userID)
                let request = try await client.appleNotify(try fx.notification("CONSUMPTION_REQUEST", signed: now, transaction: c2))
                #expect(request.status == .ok)
                let answered = {
                    try await app.dependencies.billing.answerConsumptionRequests(
                        client: try #require(app.dependencies.appStore), limit: 10, logger: Self.logger)
                }
                #expect(try await answered() == 1)
                #expect(mock.consumption.withLock { $0.isEmpty }, "no consent, nothing sent")
                #expect(
                    try await app.rows("SELECT status FROM apple_consumption_requests WHERE transaction_id = 'c2'").first?.string("status")
                        == "skipped")
                // With consent: c1 fully consumed (DECLINE), c2 30 % (GRANT_PRORATED); a 503 first is retried a minute later.
                let consent = try await client.send(.post, "/api/user/consent", token: token, json: #"{"appleConsumptionData":true}"#)
                #expect(try consent.json(Consent.self).appleConsumptionData)
                let c1 = try fx.transaction(id: "c1", product: "com.yourapp.tokens.100", purchase: now, token: userID)
                #expect(try await client.appleNotify(try fx.notification("CONSUMPTION_REQUEST", signed: now, transaction: c1)).status == .ok)
                try await app.write("UPDATE apple_consumption_requests SET status = 'pending', next_try_at_ms = 0 WHERE transaction_id = 'c2'")
                mock.script.withLock { $0 = [503, 503, 503, 503] }
                #expect(try await answered() == 2)
                #expect(try await app.rows("SELECT status FROM apple_consumption_requests WHERE status = 'pending'").count >= 1)
                app.clock.advance(seconds: 61)
                mock.script.withLock { $0 = [] }
                _ = try await answered()
                let sent = Dictionary(mock.consumption.withLock { $0 }.map { ($0.0, $0.1) }, uniquingKeysWith: { a, _ in a })
                #expect(
                    sent["c1"]
                        == AppStoreMock.ConsumptionBody(
                            customerConsented: true, sampleContentProvided: true, deliveryStatus: "DELIVERED", consumptionPercentage: 100_000,
                            refundPreference: "DECLINE"))
                #expect(
                    sent["c2"]
                        == AppStoreMock.ConsumptionBody(
                            customerConsented: true, sampleContentProvided: true, deliveryStatus: "DELIVERED", consumptionPercentage: 30_000,
                            refundPreference: "GRANT_PRORATED"))
                #expect(try await app.rows("SELECT transaction_id FROM apple_consumption_requests WHERE status = 'sent'").count == 2)
                // Answered once: another pass sends nothing more.
                _ = try await answered()
                #expect(mock.consumption.withLock { $0.count } == 2)
            }
        }
    }

    /// Reconciliation finds a refund no notification brought and claws it back once; a renewal no notification brought
    /// extends the subscription; running it again, or the late notification, changes nothing more.
    @Test(arguments: Engine.allCases)
    func reconciliationRepairsWhatNotificationsMissedOnce(engine: Engine) async throws {
        let fx = try BillingFixture()
        let mock = AppStoreMock(bundleID: BillingFixture.bundle)
        try await mock.run { base in
            let configure = try Self.configure(fx, mock, base)
            try await TestApp.run(
                engine,
                configure: {
                    configure(&$0); TestApp.webhookConfig(&$0)
                }
            ) { client, app in
                var token = try await client.signUpAndVerify(app, email: "recon@example.com")
                let userID = try await app.userID(token: token)
                let admin = try await app.apiKey(["admin"])
                let hook = #"{"url":"http://127.0.0.1:9/hook","events":["refund.clawed_back"]}"#
                #expect(try await client.send(.post, "/api/admin/webhooks", token: admin, json: hook).status == .created)
                let now = app.clock.now()
                let pack = try fx.transaction(id: "p1", product: "com.yourapp.tokens.100", purchase: now, token: userID)
                #expect(try await client.appleVerify(token, pack).status == .ok)
                let month = now.addingTimeInterval(30 * 86400)
                let sub = try fx.transaction(id: "s1", product: "com.yourapp.pro.monthly", purchase: now, expires: month, token: userID)
                #expect(try await client.appleVerify(token, sub).status == .ok)
                let balanceAnswer = try await client.get("/api/user/token-balance", token: token)
                #expect(balanceAnswer.status == .ok, "\(String(buffer: balanceAnswer.body))")
                let before = try await client.balance(token)
                // Apple's records: the pack refunded, the subscription renewed.
                let refunded = try fx.transaction(
                    id: "p1", product: "com.yourapp.tokens.100", purchase: now, token: userID, signed: now.addingTimeInterval(60),
                    revoked: now.addingTimeInterval(60))
                let renewal = try fx.transaction(
                    id: "s2", original: "s1", product: "com.yourapp.pro.monthly", purchase: month, expires: month.addingTimeInterval(30 * 86400),
                    token: userID, signed: month)
                mock.history.withLock { $0 = ["p1": [refunded], "s1": [sub, renewal]] }
                mock.refunds.withLock { $0 = ["p1": [refunded]] }
                app.clock.advance(seconds: 30 * 86400 + 60)
                token = try await client.signIn("recon@example.com", "correct horse battery").json(SignedIn.self).session.token
                let path = "/api/admin/users/\(userID)/apple/reconcile"
                let first = try await client.send(.post, path, token: admin)
                #expect(first.status == .ok, "\(String(buffer: first.body))")
                let report = try first.json(Reconciled.self)
                #expect(report.chains == 2 && report.repairs.count == 2, "\(report)")
                let after = try await client.balance(token)
                #expect(after.purchasedTokens == before.purchasedTokens - 100)
                #expect(try await client.subscription(token).isEntitled)
                #expect(try await app.rows("SELECT id FROM audit_log WHERE action = 'apple_reconciled'").count == 2)
                #expect(try await AskToBuyHTTPTests.events(app, "refund.clawed_back").count == 1)
                #expect(try await app.rows("SELECT id FROM billing_events WHERE source = 'reconcile'").count == 2)
                // Support looks the order up: the refunded pack, bound to this account; an unknown order is not valid.
                struct Order: Decodable {
                    let valid: Bool; let transactions: [T]; struct T: Decodable { let transactionId: String; let revoked: Bool; let userId: String? }
                }
                let order = try await client.send(.get, "/api/admin/apple/orders/p1", token: admin).json(Order.self)
                #expect(order.valid && order.transactions.count == 1 && order.transactions[0].revoked && order.transactions[0].userId == userID)
                #expect(try await client.send(.get, "/api/admin/apple/orders/MNOPE1", token: admin).json(Order.self).valid == false)
                #expect(try await client.send(.get, "/api/admin/apple/orders/bad%20id", token: admin).status == .badRequest)
                // Again: nothing more. The late REFUND notification: nothing more either.
                #expect(try await client.send(.post, path, token: admin).json(Reconciled.self).repairs.isEmpty)
                let late = try await client.appleNotify(try fx.notification("REFUND", signed: app.clock.now(), transaction: refunded))
                #expect(try late.json(ReceivedBody.self).outcome == "duplicate")
                #expect(try await client.balance(token).purchasedTokens == after.purchasedTokens)
                // Apple failing: 503 for the operator, nothing changed.
                mock.script.withLock { $0 = Array(repeating: 500, count: 8) }
                #expect(try await client.send(.post, path, token: admin).status == .serviceUnavailable)
            }
        }
    }

    /// Reconciliation asks Apple outside any transaction: an account erased meanwhile gets no repair (before, the renewal
    /// Apple reported started a period on the erased account: a live subscription and tokens, and the renewal's claims,
    /// so the purchase restored on a new account would never get that period).
    @Test(arguments: Engine.allCases)
    func reconciliationRepairsNothingForAnAccountErasedMeanwhile(engine: Engine) async throws {
        let fx = try BillingFixture()
        let mock = AppStoreMock(bundleID: BillingFixture.bundle)
        try await mock.run { base in
            try await TestApp.run(engine, configure: try Self.configure(fx, mock, base)) { client, app in
                let token = try await client.signUpAndVerify(app, email: "recon-gone@example.com")
                let userID = try await app.userID(token: token)
                let admin = try await app.apiKey(["admin"])
                let now = app.clock.now()
                let month = now.addingTimeInterval(30 * 86400)
                let sub = try fx.transaction(id: "g1", product: "com.yourapp.pro.monthly", purchase: now, expires: month, token: userID)
                #expect(try await client.appleVerify(token, sub).status == .ok)
                let renewal = try fx.transaction(
                    id: "g2", original: "g1", product: "com.yourapp.pro.monthly", purchase: month, expires: month.addingTimeInterval(30 * 86400),
                    token: userID, signed: month)
                mock.history.withLock { $0 = ["g1": [sub, renewal]] }
                app.clock.advance(seconds: 30 * 86400 + 60)
                let fresh = try await client.signIn("recon-gone@example.com", "correct horse battery").json(SignedIn.self).session.token
                mock.during.withLock {
                    $0 = (
                        "statuses",
                        {
                            let erased = try? await client.send(.delete, "/api/user/me", token: fresh, json: #"{"password":"correct horse battery"}"#)
                            #expect(erased?.status == .noContent)
                        }
                    )
                }
                let answer = try await client.send(.post, "/api/admin/users/\(userID)/apple/reconcile", token: admin)
                #expect(answer.status == .ok, "\(String(buffer: answer.body))")
                #expect(try answer.json(Reconciled.self).repairs.isEmpty)
                #expect(try await app.rows("SELECT user_id FROM subscriptions WHERE user_id = ? AND status = 'active'", [userID]).isEmpty)
                #expect(try await app.rows("SELECT source_id FROM billing_grants WHERE source_id = 'g2'").isEmpty)
                let balance = try await app.rows("SELECT COALESCE(SUM(balance), 0) AS b FROM ledger_accounts WHERE user_id = ?", [userID])
                #expect(try balance[0].int("b") == 0)
            }
        }
    }

    /// Offers are signed only for eligible accounts, over the text Apple verifies.
    @Test(arguments: Engine.allCases)
    func offerSignaturesOnlyForEligibleAccounts(engine: Engine) async throws {
        let fx = try BillingFixture()
        let mock = AppStoreMock(bundleID: BillingFixture.bundle)
        try await mock.run { base in
            try await TestApp.run(engine, configure: try Self.configure(fx, mock, base)) { client, app in
                var token = try await client.signUpAndVerify(app, email: "offer@example.com")
                let userID = try await app.userID(token: token)
                func offer(_ kind: String, product: String = "com.yourapp.pro.monthly", id: String? = nil) async throws -> TestResponse {
                    let offerID = id ?? (kind == "win_back" ? "pro_monthly_winback" : "pro_monthly_promo")
                    return try await client.send(
                        .post, "/api/iap/apple/offer-signature", token: token,
                        json: #"{"productId":"\#(product)","offerId":"\#(offerID)","kind":"\#(kind)"}"#)
                }
                let never = try await offer("promotional")
                #expect(never.status == .forbidden)
                #expect(try never.problem().code == "offer_not_eligible")
                #expect(try await offer("promotional", product: "com.yourapp.tokens.100").status == .forbidden)
                #expect(try await offer("lifetime").status == .badRequest)
                let now = app.clock.now()
                let sub = try fx.transaction(
                    id: "o1", product: "com.yourapp.pro.monthly", purchase: now, expires: now.addingTimeInterval(30 * 86400), token: userID)
                #expect(try await client.appleVerify(token, sub).status == .ok)
                #expect(try await offer("win_back").status == .forbidden, "subscribed now")
                // Only an offer the plan lists for that kind is signed (the app chose any id it liked before).
                for (kind, id) in [("promotional", "free_forever"), ("promotional", "pro_monthly_winback"), ("win_back", "pro_monthly_promo")] {
                    let unlisted = try await offer(kind, id: id)
                    #expect(try unlisted.status == .forbidden && unlisted.problem().code == "offer_not_eligible", "\(kind) \(id)")
                }
                #expect(try await offer("promotional", product: "com.yourapp.pro.yearly", id: "pro_monthly_promo").status == .forbidden)
                let signed = try await offer("promotional")
                #expect(signed.status == .ok, "\(String(buffer: signed.body))")
                let body = try signed.json(Offer.self)
                let text = AppleOfferSigner.payload(
                    bundleID: BillingFixture.bundle, keyID: AppStoreMock.keyID, productID: "com.yourapp.pro.monthly", offerID: "pro_monthly_promo",
                    appAccountToken: userID, nonce: body.nonce, timestamp: body.timestamp)
                let signature = try P256.Signing.ECDSASignature(derRepresentation: try #require(Data(base64Encoded: body.signature)))
                #expect(mock.key.publicKey.isValidSignature(signature, for: Data(text.utf8)))
                #expect(body.appAccountToken == userID && body.nonce == body.nonce.lowercased())
                // Lapsed: a win-back offer now (a new session: the old one idled out).
                app.clock.advance(seconds: 31 * 86400)
                token = try await client.signIn("offer@example.com", "correct horse battery").json(SignedIn.self).session.token
                let winBack = try await offer("win_back")
                #expect(winBack.status == .ok, "\(String(buffer: winBack.body))")
            }
        }
    }
}
