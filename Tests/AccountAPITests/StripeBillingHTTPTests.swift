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

@Suite("Billing over HTTP: Stripe")
struct StripeBillingHTTPTests {
    @Test(arguments: TestDatabase.engines)
    func stripeWebhooksAreSignedDeduplicatedAndOrderTolerant(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            var story = try await StripeStory(client: client, app: app)
            try await story.packsAreGrantedOnceAndSignaturesChecked()
            try await story.partialRefundsAreCumulative()
            try await story.datesOutOfRangeAreRefused()
            try await story.subscriptionsFollowTheirEventsInAnyOrder()
            try await story.everythingIsOnRecord()
        }
    }

    /// What a refund or a chargeback ended stays ended (an outside reviewer): a plan switch in Stripe's portal after a
    /// full refund neither brings access back nor tops the refunded period up; a lost dispute takes a pack's tokens back
    /// as a refund does; an event of another Stripe subscription of the account changes nothing of the current one.
    @Test(arguments: TestDatabase.engines)
    func refundsAndChargebacksStay(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let story = try await StripeStory(client: client, app: app)
            let u = story.user
            let end = Int64(story.now.timeIntervalSince1970) + 2_592_000
            #expect(try await story.subscribe("f", price: "price_pro_monthly", invoice: "in_f1") == "applied")
            let other = stripeEvent(
                "evt_f2", "customer.subscription.updated", created: story.now.addingTimeInterval(30),
                #"{"id":"sub_old","object":"subscription","status":"active","customer":"cus_f","cancel_at_period_end":true,"items":{"data":[{"price":{"id":"price_pro_monthly"},"current_period_end":\#(end)}]}}"#
            )
            #expect(try await story.outcome(other, at: story.now.addingTimeInterval(30)) == "acknowledged")
            #expect(try await client.subscription(story.token).willRenew == true)
            let refund = stripeEvent(
                "evt_f3", "charge.refunded", created: story.now.addingTimeInterval(60),
                #"{"id":"ch_f1","object":"charge","amount":999,"amount_refunded":999,"invoice":"in_f1"}"#)
            #expect(try await story.outcome(refund, at: story.now.addingTimeInterval(60)) == "applied")
            #expect(try await client.balance(story.token).subscriptionTokens == 0)
            let switched = stripeEvent(
                "evt_f4", "customer.subscription.updated", created: story.now.addingTimeInterval(90),
                #"{"id":"sub_f","object":"subscription","status":"active","customer":"cus_f","items":{"data":[{"price":{"id":"price_max_monthly"},"current_period_end":\#(end)}]}}"#
            )
            _ = try await story.outcome(switched, at: story.now.addingTimeInterval(90))
            #expect(try await client.subscription(story.token).isEntitled == false)
            #expect(try await client.balance(story.token).subscriptionTokens == 0)
            let pack = stripeEvent(
                "evt_f5", "checkout.session.completed", created: story.now.addingTimeInterval(120),
                #"{"id":"cs_f5","object":"checkout.session","mode":"payment","payment_status":"paid","client_reference_id":"\#(u)","customer":"cus_f","payment_intent":"pi_f5","metadata":{"priceId":"price_tokens_25"}}"#
            )
            #expect(try await story.outcome(pack, at: story.now.addingTimeInterval(120)) == "applied")
            #expect(try await client.balance(story.token).purchasedTokens == 25)
            let dispute = stripeEvent(
                "evt_f6", "charge.dispute.funds_withdrawn", created: story.now.addingTimeInterval(150),
                #"{"id":"dp_f6","object":"dispute","charge":"ch_f5","payment_intent":"pi_f5","amount":499,"status":"needs_response"}"#)
            #expect(try await story.outcome(dispute, at: story.now.addingTimeInterval(150)) == "applied")
            #expect(try await client.balance(story.token).purchasedTokens == 0)
            #expect(try await story.booksBalance())
        }
    }

    /// A refund of last month's invoice, after the renewal, takes back last month's tokens and leaves this month's
    /// period and access alone (before, it clawed the current period and ended the subscription); a dispute of the same
    /// charge then takes nothing more (before, a second clawback).
    @Test(arguments: TestDatabase.engines)
    func aRefundOfAnEarlierInvoiceTakesBackOnlyItsMonth(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let story = try await StripeStory(client: client, app: app)
            #expect(try await story.subscribe("e", price: "price_basic_monthly", invoice: "in_e1") == "applied")
            let (start, renewedAt, token) = try await story.aMonthLater()
            let renewal = StripeStory.renewal("e", invoice: "in_e2", price: "price_basic_monthly", start: start)
            #expect(try await story.outcome(renewal, at: renewedAt) == "applied")
            #expect(try await client.balance(token).subscriptionTokens == 100)
            // As on API basil: the first invoice's payment names its payment intent, which the charge and dispute carry.
            let paid = stripeEvent(
                "evt_e5", "invoice_payment.paid", created: story.now.addingTimeInterval(5),
                #"{"id":"inpay_e1","object":"invoice_payment","invoice":"in_e1","payment":{"type":"payment_intent","payment_intent":"pi_e1"},"status":"paid"}"#
            )
            #expect(try await story.outcome(paid, at: renewedAt.addingTimeInterval(10)) == "applied")
            let refund = stripeEvent(
                "evt_e3", "charge.refunded", created: renewedAt.addingTimeInterval(30),
                #"{"id":"ch_e1","object":"charge","amount":499,"amount_refunded":499,"payment_intent":"pi_e1"}"#)
            #expect(try await story.outcome(refund, at: renewedAt.addingTimeInterval(30)) == "applied")
            #expect(try await client.subscription(token).isEntitled)
            #expect(try await client.balance(token).subscriptionTokens == 50)
            let dispute = stripeEvent(
                "evt_e4", "charge.dispute.funds_withdrawn", created: renewedAt.addingTimeInterval(60),
                #"{"id":"dp_e4","object":"dispute","charge":"ch_e1","payment_intent":"pi_e1","amount":499,"status":"needs_response"}"#)
            #expect(try await story.outcome(dispute, at: renewedAt.addingTimeInterval(60)) == "ignored")
            #expect(try await client.subscription(token).isEntitled)
            #expect(try await client.balance(token).subscriptionTokens == 50)
            #expect(try await story.booksBalance())
        }
    }

    /// A refund of an erased account's subscription payment changes nothing: before, it was applied to the erased
    /// account (a clawback event about it, its period rows marked).
    @Test(arguments: TestDatabase.engines)
    func aRefundForAnErasedAccountPostsNothing(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let story = try await StripeStory(client: client, app: app)
            #expect(try await story.subscribe("x", price: "price_basic_monthly", invoice: "in_x1") == "applied")
            let erased = try await client.send(.delete, "/api/user/me", token: story.token, json: #"{"password":"correct horse battery"}"#)
            #expect(erased.status == .noContent)
            let refund = stripeEvent(
                "evt_x2", "charge.refunded", created: story.now.addingTimeInterval(30),
                #"{"id":"ch_x1","object":"charge","amount":499,"amount_refunded":499,"invoice":"in_x1"}"#)
            #expect(try await story.outcome(refund, at: story.now.addingTimeInterval(30)) == "ignored")
            let marked = try await app.rows("SELECT refund FROM ledger_period_grants WHERE user_id = ?", [story.user])
            #expect(try marked.map { try $0.string("refund") } == ["none"])
            #expect(try await story.booksBalance())
        }
    }

    /// Before Stripe's API basil an invoice names its payment intent, and a dispute names only that: funds withdrawn by a
    /// dispute of the first invoice and of a renewal each take back their own month (before, neither matched anything, for
    /// good); a dispute the merchant won (funds reinstated) gives its month back.
    @Test(arguments: TestDatabase.engines)
    func lostDisputesOfSubscriptionPaymentsAreTakenBack(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let story = try await StripeStory(client: client, app: app)
            try await story.subscribePaidBy("d")
            let (start, renewedAt, token) = try await story.aMonthLater()
            let renewal = StripeStory.renewal("d", invoice: "in_d2", price: "price_basic_monthly", start: start, intent: "pi_d2")
            #expect(try await story.outcome(renewal, at: renewedAt) == "applied")
            #expect(try await client.balance(token).subscriptionTokens == 100)
            for (n, intent, left, entitled) in [(1, "pi_d1", Int64(50), true), (2, "pi_d2", 0, false)] {
                let dispute = stripeEvent(
                    "evt_dd\(n)", "charge.dispute.funds_withdrawn", created: renewedAt.addingTimeInterval(Double(30 * n)),
                    #"{"id":"dp_d\#(n)","object":"dispute","charge":"ch_d\#(n)","payment_intent":"\#(intent)","amount":499,"status":"lost"}"#)
                #expect(try await story.outcome(dispute, at: renewedAt.addingTimeInterval(Double(30 * n))) == "applied")
                #expect(try await client.balance(token).subscriptionTokens == left)
                #expect(try await client.subscription(token).isEntitled == entitled)
            }
            // The merchant won the second dispute: the month's tokens and access return.
            let won = stripeEvent(
                "evt_dd3", "charge.dispute.funds_reinstated", created: renewedAt.addingTimeInterval(90),
                #"{"id":"dp_d2","object":"dispute","charge":"ch_d2","payment_intent":"pi_d2","amount":499,"status":"won"}"#)
            #expect(try await story.outcome(won, at: renewedAt.addingTimeInterval(90)) == "applied")
            #expect(try await client.balance(token).subscriptionTokens == 50)
            #expect(try await client.subscription(token).isEntitled)
            #expect(try await story.booksBalance())
        }
    }

    /// A renewal's `invoice.paid` delivered after the cancellation that followed it (`customer.subscription.deleted`)
    /// grants the paid month's tokens, as in the order it happened, and leaves the subscription ended; once.
    @Test(arguments: TestDatabase.engines)
    func aRenewalDeliveredAfterTheCancellationStillGrantsItsMonth(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let story = try await StripeStory(client: client, app: app)
            #expect(try await story.subscribe("x", price: "price_basic_monthly", invoice: "in_x1") == "applied")
            let (start, renewedAt, token) = try await story.aMonthLater()
            let deleted = stripeEvent(
                "evt_x9", "customer.subscription.deleted", created: renewedAt.addingTimeInterval(120),
                #"{"id":"sub_x","object":"subscription","status":"canceled","customer":"cus_x"}"#)
            #expect(try await story.outcome(deleted, at: renewedAt.addingTimeInterval(130)) == "applied")
            #expect(try await client.subscription(token).isEntitled == false)
            let renewal = StripeStory.renewal("x", invoice: "in_x2", price: "price_basic_monthly", start: start)
            #expect(try await story.outcome(renewal, at: renewedAt.addingTimeInterval(140)) == "stale")
            #expect(try await client.balance(token).subscriptionTokens == 100)
            #expect(try await client.subscription(token).isEntitled == false)
            let again = StripeStory.renewal("x", invoice: "in_x2", price: "price_basic_monthly", start: start, event: "evt_x3")
            #expect(try await story.outcome(again, at: renewedAt.addingTimeInterval(150)) == "duplicate")
            #expect(try await client.balance(token).subscriptionTokens == 100)
            #expect(try await story.booksBalance())
        }
    }

    /// A renewal delivered after a refund of the month before it (which ended the subscription then, as that month was
    /// current) applies in full: nothing newer ended the subscription, so the paid month brings access back.
    @Test(arguments: TestDatabase.engines)
    func aRenewalDeliveredAfterTheRefundOfTheMonthBeforeRestoresAccess(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let story = try await StripeStory(client: client, app: app)
            try await story.subscribePaidBy("y")
            let (start, renewedAt, token) = try await story.aMonthLater()
            let refund = stripeEvent(
                "evt_y8", "charge.refunded", created: renewedAt.addingTimeInterval(30),
                #"{"id":"ch_y1","object":"charge","amount":499,"amount_refunded":499,"payment_intent":"pi_y1"}"#)
            #expect(try await story.outcome(refund, at: renewedAt.addingTimeInterval(40)) == "applied")
            #expect(try await client.subscription(token).isEntitled == false)
            let renewal = StripeStory.renewal("y", invoice: "in_y2", price: "price_basic_monthly", start: start)
            #expect(try await story.outcome(renewal, at: renewedAt.addingTimeInterval(50)) == "applied")
            #expect(try await client.subscription(token).isEntitled)
            #expect(try await client.balance(token).subscriptionTokens == 50)
            #expect(try await story.booksBalance())
        }
    }

    /// Stripe does not promise delivery order: a dispute's `funds_reinstated` (sent after its `funds_withdrawn`) received
    /// first leaves the withdrawal nothing to take, for a period and for a pack; another dispute of the same payment still
    /// takes, and one dispute's reinstatement never gives back what another's withdrawal took.
    @Test(arguments: TestDatabase.engines)
    func aDisputeWonBeforeItsWithdrawalArrivedTakesNothing(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let story = try await StripeStory(client: client, app: app)
            try await story.subscribePaidBy("o")
            var received = 100.0
            /// An event sent `sent` seconds after the story's start, received after every earlier one.
            func deliver(_ type: String, sent: Double, _ object: String) async throws -> String {
                received += 10
                let event = stripeEvent("evt_o\(Int(received))", type, created: story.now.addingTimeInterval(sent), object)
                return try await story.outcome(event, at: story.now.addingTimeInterval(received))
            }
            let dispute = #"{"id":"dp_o1","object":"dispute","charge":"ch_o1","payment_intent":"pi_o1","amount":499}"#
            #expect(try await deliver("charge.dispute.funds_reinstated", sent: 60, dispute) == "ignored")
            #expect(try await deliver("charge.dispute.funds_withdrawn", sent: 30, dispute) == "ignored")
            #expect(try await client.balance(story.token).subscriptionTokens == 50)
            #expect(try await client.subscription(story.token).isEntitled)
            let pack =
                #"{"id":"cs_op","object":"checkout.session","mode":"payment","payment_status":"paid","client_reference_id":"\#(story.user)","customer":"cus_o","payment_intent":"pi_op","metadata":{"priceId":"price_tokens_25"}}"#
            #expect(try await deliver("checkout.session.completed", sent: 70, pack) == "applied")
            let packDispute = #"{"id":"dp_o2","object":"dispute","charge":"ch_op","payment_intent":"pi_op","amount":400}"#
            #expect(try await deliver("charge.dispute.funds_reinstated", sent: 90, packDispute) == "ignored")
            #expect(try await deliver("charge.dispute.funds_withdrawn", sent: 80, packDispute) == "ignored")
            #expect(try await client.balance(story.token).purchasedTokens == 25)
            // Another dispute of the same payment is another matter, and a third one's early reinstatement gives back
            // nothing of what the second took.
            let another = #"{"id":"dp_o3","object":"dispute","charge":"ch_op","payment_intent":"pi_op","amount":400}"#
            #expect(try await deliver("charge.dispute.funds_withdrawn", sent: 95, another) == "applied")
            #expect(try await client.balance(story.token).purchasedTokens == 0)
            let third = #"{"id":"dp_o4","object":"dispute","charge":"ch_op","payment_intent":"pi_op","amount":400}"#
            #expect(try await deliver("charge.dispute.funds_reinstated", sent: 99, third) == "ignored")
            #expect(try await client.balance(story.token).purchasedTokens == 0)
            #expect(try await deliver("charge.dispute.funds_reinstated", sent: 98, another) == "applied")
            #expect(try await client.balance(story.token).purchasedTokens == 25)
            #expect(try await story.booksBalance())
        }
    }

    /// A won dispute (funds reinstated) gives back only what its own withdrawal took: a period withdrawn and reinstated
    /// is still taken by a later refund; a dispute after a refund takes nothing, so winning it gives nothing; a pack's
    /// partial refund stays taken when a dispute of the rest is won (before, a won dispute gave back the refund's take too).
    @Test(arguments: TestDatabase.engines)
    func aWonDisputeGivesBackOnlyWhatItTook(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let story = try await StripeStory(client: client, app: app)
            try await story.subscribePaidBy("w")
            let send = StripeSequence(story, tag: "w").send
            func state() async throws -> (Int, Bool) {
                (try await client.balance(story.token).subscriptionTokens, try await client.subscription(story.token).isEntitled)
            }
            let dispute1 = #"{"id":"dp_w1","object":"dispute","charge":"ch_w1","payment_intent":"pi_w1","amount":499}"#
            #expect(try await send("charge.dispute.funds_withdrawn", dispute1) == "applied")
            #expect(try await state() == (0, false))
            #expect(try await send("charge.dispute.funds_reinstated", dispute1) == "applied")
            #expect(try await state() == (50, true))
            #expect(
                try await send("charge.refunded", #"{"id":"ch_w1","object":"charge","amount":499,"amount_refunded":499,"payment_intent":"pi_w1"}"#)
                    == "applied")
            #expect(try await state() == (0, false))
            let dispute2 = #"{"id":"dp_w2","object":"dispute","charge":"ch_w1","payment_intent":"pi_w1","amount":499}"#
            #expect(try await send("charge.dispute.funds_withdrawn", dispute2) == "ignored")
            #expect(try await send("charge.dispute.funds_reinstated", dispute2) == "ignored")
            #expect(try await state() == (0, false))
            let pack =
                #"{"id":"cs_wp","object":"checkout.session","mode":"payment","payment_status":"paid","client_reference_id":"\#(story.user)","customer":"cus_w","payment_intent":"pi_wp","metadata":{"priceId":"price_tokens_25"}}"#
            #expect(try await send("checkout.session.completed", pack) == "applied")
            #expect(
                try await send("charge.refunded", #"{"id":"ch_wp","object":"charge","amount":400,"amount_refunded":200,"payment_intent":"pi_wp"}"#)
                    == "applied")
            let left = try await client.balance(story.token).purchasedTokens
            #expect(left < 25 && left > 0)
            // 10 of what is left are spent (after every other bucket), so the dispute takes the rest and records 10 it
            // could not take.
            let others = try await client.balance(story.token)
            let spend = try await client.ledger(
                "/api/ledger/spend", key: try await app.apiKey(["ledger:write"]), idempotencyKey: "w-spend",
                json: #"{"userId":"\#(story.user)","amount":\#(others.bonusTokens + others.subscriptionTokens + 10),"reason":"generation"}"#)
            #expect(spend.status == .ok)
            let dispute3 = #"{"id":"dp_w3","object":"dispute","charge":"ch_wp","payment_intent":"pi_wp","amount":400}"#
            #expect(try await send("charge.dispute.funds_withdrawn", dispute3) == "applied")
            #expect(try await client.balance(story.token).purchasedTokens == 0)
            #expect(try await send("charge.dispute.funds_reinstated", dispute3) == "applied")
            #expect(try await client.balance(story.token).purchasedTokens == left - 10)
            // Won back, the shortfall no longer counts as taken: only the partial refund's take stays recorded.
            let grant = try await app.rows("SELECT clawed_tokens, shortfall_tokens FROM billing_grants WHERE source_id = 'checkout:cs_wp'")
            #expect(try grant.map { "\(try $0.int("clawed_tokens"))/\(try $0.int("shortfall_tokens"))" } == ["\(25 - left)/0"])
            #expect(try await story.booksBalance())
        }
    }

    /// On Stripe's API 2025-03-31.basil and later a charge names only its payment intent and an invoice names none:
    /// `invoice_payment.paid` links them. A full refund of a renewal, arriving before both its invoice and that link,
    /// is applied once they come (before, it matched nothing for good, and access and the period's tokens stayed).
    @Test(arguments: TestDatabase.engines)
    func aRenewalRefundedOnTheBasilAPIIsTakenBack(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let story = try await StripeStory(client: client, app: app)
            #expect(try await story.subscribe("b", price: "price_basic_monthly", invoice: "in_b1") == "applied")
            let (start, renewedAt, token) = try await story.aMonthLater()
            let refund = stripeEvent(
                "evt_b2", "charge.refunded", created: renewedAt.addingTimeInterval(30),
                #"{"id":"ch_b2","object":"charge","amount":499,"amount_refunded":499,"payment_intent":"pi_b2"}"#)
            #expect(try await story.outcome(refund, at: renewedAt.addingTimeInterval(30)) == "unmatched")
            let renewal = StripeStory.renewal("b", invoice: "in_b2", price: "price_basic_monthly", start: start, event: "evt_b3")
            #expect(try await story.outcome(renewal, at: renewedAt) == "applied")
            #expect(try await client.subscription(token).isEntitled)
            let renewed = try await client.balance(token).subscriptionTokens
            let paid = stripeEvent(
                "evt_b4", "invoice_payment.paid", created: renewedAt.addingTimeInterval(5),
                #"{"id":"inpay_b2","object":"invoice_payment","invoice":"in_b2","payment":{"type":"payment_intent","payment_intent":"pi_b2"},"status":"paid"}"#
            )
            #expect(try await story.outcome(paid, at: renewedAt.addingTimeInterval(5)) == "applied")
            #expect(try await client.subscription(token).isEntitled == false)
            // The renewal's month is taken back; what the first, unrefunded month left stays.
            #expect(try await client.balance(token).subscriptionTokens == renewed - 50)
            #expect(try await story.booksBalance())
        }
    }

    /// A checkout that paid nothing (Stripe's trial) starts the plan's trial, as an App Store free trial does: status
    /// `trialing` until the plan's `trialDays` end, not a paid month of access.
    @Test(arguments: TestDatabase.engines)
    func aTrialCheckoutIsATrial(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let story = try await StripeStory(client: client, app: app)
            #expect(try await story.subscribe("t", price: "price_basic_monthly", paymentStatus: "no_payment_required") == "applied")
            #expect(try await client.subscription(story.token).status == "trialing")
            app.clock.advance(seconds: 8 * 86400)
            let token = try await client.signIn("stripe@example.com", "correct horse battery").json(AppStoreServerHTTPTests.SignedIn.self).session
                .token
            #expect(try await client.subscription(token).isEntitled == false, "the 7-day trial is over")
        }
    }

    /// A checkout whose Stripe customer belongs to another account is a conflict and binds nothing: not its
    /// subscription either, so that subscription's invoices never start a plan on the account that lost the conflict.
    @Test(arguments: TestDatabase.engines)
    func aCheckoutWithAnotherAccountsCustomerBindsNothing(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let story = try await StripeStory(client: client, app: app)
            let first = stripeEvent(
                "evt_k1", "checkout.session.completed", created: story.now,
                #"{"id":"cs_k1","object":"checkout.session","mode":"payment","payment_status":"paid","client_reference_id":"\#(story.user)","customer":"cus_k","payment_intent":"pi_k1","metadata":{"priceId":"price_tokens_25"}}"#
            )
            #expect(try await story.outcome(first, at: story.now) == "applied")
            let other = try await client.signUpAndVerify(app, email: "other-stripe@example.com")
            let otherUser = try await app.userID(token: other)
            let taken = stripeEvent(
                "evt_k2", "checkout.session.completed", created: story.now,
                #"{"id":"cs_k2","object":"checkout.session","mode":"subscription","payment_status":"paid","client_reference_id":"\#(otherUser)","customer":"cus_k","subscription":"sub_k2","metadata":{"priceId":"price_pro_monthly"}}"#
            )
            #expect(try await story.outcome(taken, at: story.now) == "conflict")
            #expect(try await app.rows("SELECT user_id FROM billing_accounts WHERE external_id = 'sub:sub_k2'").isEmpty)
            #expect(try await client.subscription(other).planId == "free")
        }
    }

    /// A plan switch within a Stripe period (prorated, its invoice not a new period) never starts a new month of
    /// tokens: an upgrade tops the period up to the bigger plan's tokens once; switching down, back and up again grants
    /// nothing more (a reviewer switched back and forth for a month of tokens each time). The books still balance.
    @Test(arguments: TestDatabase.engines)
    func planSwitchesWithinAPeriodNeverGrantAnotherMonth(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let story = try await StripeStory(client: client, app: app)
            #expect(try await story.subscribe("s", price: "price_basic_monthly") == "applied")
            #expect(try await client.balance(story.token).subscriptionTokens == 50)
            let end = Int64(story.now.timeIntervalSince1970) + 2_592_000
            for (index, price) in ["price_max_monthly", "price_basic_monthly", "price_max_monthly", "price_pro_monthly", "price_max_monthly"]
                .enumerated()
            {
                let at = story.now.addingTimeInterval(Double(60 * (index + 1)))
                let switched = stripeEvent(
                    "evt_sw\(index)", "customer.subscription.updated", created: at,
                    #"{"id":"sub_s","object":"subscription","status":"active","customer":"cus_s","items":{"data":[{"price":{"id":"\#(price)"},"current_period_end":\#(end)}]}}"#
                )
                #expect(try await story.outcome(switched, at: at) == "applied", "\(price)")
                #expect(try await client.subscription(story.token).planId == price.replacingOccurrences(of: "price_", with: ""))
                #expect(try await client.balance(story.token).subscriptionTokens == 400, "after \(price): the bigger plan's month, once")
            }
            #expect(try await story.booksBalance())
        }
    }
}

/// One Stripe customer's events, step by step.
struct StripeStory {
    let client: any TestClientProtocol
    let app: TestApp
    let user: String
    var token: String
    let now: Date
    var later: Date

    init(client: any TestClientProtocol, app: TestApp) async throws {
        (self.client, self.app) = (client, app)
        token = try await client.signUpAndVerify(app, email: "stripe@example.com")
        user = try await app.userID(token: token)
        now = app.clock.now()
        later = now
    }

    func outcome(_ event: String, at date: Date) async throws -> String { try await client.stripe(event, at: date).json(ReceivedBody.self).outcome }

    /// A subscription checkout of this user for `price`, as Stripe sends it (session `cs_<tag>`, customer `cus_<tag>`,
    /// subscription `sub_<tag>`, event `evt_<tag>`), at the story's start; its outcome.
    func subscribe(_ tag: String, price: String, paymentStatus: String = "paid", invoice: String? = nil) async throws -> String {
        let invoiceField = invoice.map { #""invoice":"\#($0)","# } ?? ""
        let checkout = stripeEvent(
            "evt_\(tag)", "checkout.session.completed", created: now,
            #"{"id":"cs_\#(tag)","object":"checkout.session","mode":"subscription","payment_status":"\#(paymentStatus)","client_reference_id":"\#(user)","customer":"cus_\#(tag)","subscription":"sub_\#(tag)",\#(invoiceField)"metadata":{"priceId":"\#(price)"}}"#
        )
        return try await outcome(checkout, at: now)
    }

    /// A month on: the clock passes the first period's end and the user signs in again (the session idled out). The
    /// renewal's start (Unix seconds, and as a date) and the new session's token.
    func aMonthLater() async throws -> (start: Int64, renewedAt: Date, token: String) {
        let start = Int64(now.timeIntervalSince1970) + 2_592_000
        app.clock.advance(seconds: 2_592_000 + 60)
        let token = try await client.signIn("stripe@example.com", "correct horse battery").json(AppStoreServerHTTPTests.SignedIn.self).session.token
        return (start, Date(timeIntervalSince1970: Double(start)), token)
    }

    /// The `invoice.paid` of a monthly renewal of `sub_<tag>` (customer `cus_<tag>`) starting at `start`, as Stripe sends it.
    /// `reason` `subscription_create` is the first invoice's; `intent`: the payment intent it names (APIs before basil).
    static func renewal(
        _ tag: String, invoice: String, price: String, start: Int64, event: String? = nil, reason: String = "subscription_cycle",
        intent: String? = nil
    ) -> String {
        let paidBy = intent.map { #""payment_intent":"\#($0)","# } ?? ""
        return stripeEvent(
            event ?? "evt_\(tag)2", "invoice.paid", created: Date(timeIntervalSince1970: Double(start)),
            #"{"id":"\#(invoice)","object":"invoice","billing_reason":"\#(reason)",\#(paidBy)"customer":"cus_\#(tag)","parent":{"subscription_details":{"subscription":"sub_\#(tag)"}},"lines":{"data":[{"pricing":{"price_details":{"price":"\#(price)"}},"period":{"start":\#(start),"end":\#(start + 2_592_000)}}]}}"#
        )
    }

    /// A basic monthly checkout (``subscribe``, invoice `in_<tag>1`) whose first invoice names its payment intent
    /// `pi_<tag>1`, as before API basil.
    func subscribePaidBy(_ tag: String) async throws {
        #expect(try await subscribe(tag, price: "price_basic_monthly", invoice: "in_\(tag)1") == "applied")
        let first = Self.renewal(
            tag, invoice: "in_\(tag)1", price: "price_basic_monthly", start: Int64(now.timeIntervalSince1970), event: "evt_\(tag)1",
            reason: "subscription_create", intent: "pi_\(tag)1")
        #expect(try await outcome(first, at: now) == "acknowledged")
    }

    /// `ledger verify` finds the books balanced.
    func booksBalance() async throws -> Bool {
        let verify = try await client.get("/api/admin/ledger/verify", token: try await app.apiKey(["admin"]))
        return verify.status == .ok && verify.text.contains(#""ok":true"#)
    }

    /// A refund before its checkout waits; a pack checkout grants once; bad signatures change and store nothing; the
    /// rotated-out secret still verifies.
    func packsAreGrantedOnceAndSignaturesChecked() async throws {
        let earlyRefund = stripeEvent(
            "evt_r0", "charge.refunded", created: now,
            #"{"id":"ch_1","object":"charge","amount":1499,"amount_refunded":1499,"payment_intent":"pi_2"}"#)
        #expect(try await outcome(earlyRefund, at: now) == "unmatched")
        let checkout = stripeEvent(
            "evt_1", "checkout.session.completed", created: now,
            #"{"id":"cs_1","object":"checkout.session","mode":"payment","payment_status":"paid","client_reference_id":"\#(user)","customer":"cus_1","payment_intent":"pi_1","metadata":{"priceId":"price_tokens_25"}}"#
        )
        let first = try await client.stripe(checkout, at: now)
        #expect(try first.status == .ok && (first.json(ReceivedBody.self).outcome) == "applied")
        #expect(try await outcome(checkout, at: now.addingTimeInterval(60)) == "duplicate")
        #expect(try await client.balance(token).purchasedTokens == 25)
        let other = stripeEvent(
            "evt_2", "checkout.session.completed", created: now,
            #"{"id":"cs_2","object":"checkout.session","mode":"payment","payment_status":"paid","client_reference_id":"\#(user)","payment_intent":"pi_2","metadata":{"priceId":"price_tokens_100"}}"#
        )
        let wrong = try await client.stripe(other, at: now, secret: "whsec_someone_else_000000")
        #expect(try wrong.status == .badRequest && (wrong.problem().code) == "invalid_signature")
        let stale = try await client.stripe(other, at: now.addingTimeInterval(-301))
        #expect(try stale.status == .badRequest && (stale.problem().detail.contains("old")))
        #expect(try await client.stripe(other, at: now.addingTimeInterval(301)).status == .badRequest)
        let noHeader = try await client.post("/api/webhooks/stripe", json: other)
        #expect(try noHeader.status == .badRequest && (noHeader.problem().detail.contains("Stripe-Signature")))
        #expect(try await client.balance(token).purchasedTokens == 25)
        #expect(try await client.stripe(other, at: now, secret: "whsec_retired_secret_000000").json(ReceivedBody.self).outcome == "applied")
        // …and the early refund of pi_2 was applied right after: 100 granted, 100 clawed back.
        #expect(try await client.balance(token).purchasedTokens == 25)
        #expect(try await app.rows("SELECT verdict FROM billing_events WHERE external_id = 'evt_r0'").first?.string("verdict") == "applied")
    }

    /// Partial refunds of the first pack are cumulative: 40 % then 100 %.
    func partialRefundsAreCumulative() async throws {
        let partial = stripeEvent(
            "evt_3", "charge.refunded", created: now.addingTimeInterval(10),
            #"{"id":"ch_2","object":"charge","amount":499,"amount_refunded":200,"payment_intent":"pi_1"}"#)
        #expect(try await outcome(partial, at: now) == "applied")
        #expect(try await client.balance(token).purchasedTokens == 15)  // 25 × 200/499 = 10 clawed
        let rest = stripeEvent(
            "evt_4", "charge.refunded", created: now.addingTimeInterval(20),
            #"{"id":"ch_2","object":"charge","amount":499,"amount_refunded":499,"payment_intent":"pi_1"}"#)
        #expect(try await outcome(rest, at: now) == "applied")
        #expect(try await client.balance(token).purchasedTokens == 0)
        // Amounts near Int64's end (a signed event can carry any): the share is exact, and nothing traps.
        let pack = stripeEvent(
            "evt_h1", "checkout.session.completed", created: now.addingTimeInterval(21),
            #"{"id":"cs_h","object":"checkout.session","mode":"payment","payment_status":"paid","client_reference_id":"\#(user)","payment_intent":"pi_h","metadata":{"priceId":"price_tokens_25"}}"#
        )
        #expect(try await outcome(pack, at: now) == "applied")
        let huge = stripeEvent(
            "evt_h2", "charge.refunded", created: now.addingTimeInterval(22),
            #"{"id":"ch_h","object":"charge","amount":5000000000000000000,"amount_refunded":2000000000000000000,"payment_intent":"pi_h"}"#)
        #expect(try await outcome(huge, at: now) == "applied")
        #expect(try await client.balance(token).purchasedTokens == 15)  // 40 % of 25
        let all = stripeEvent(
            "evt_h3", "charge.refunded", created: now.addingTimeInterval(23),
            #"{"id":"ch_h","object":"charge","amount":9223372036854775807,"amount_refunded":9223372036854775807,"payment_intent":"pi_h"}"#)
        #expect(try await outcome(all, at: now) == "applied")
        #expect(try await client.balance(token).purchasedTokens == 0)
    }

    /// A signed event with a date outside 1970-2100 anywhere it is read (created, any line's or item's period) is refused
    /// whole: stored as the user's last event time, it made every later event of theirs stale.
    func datesOutOfRangeAreRefused() async throws {
        let base = Int64(now.timeIntervalSince1970)
        let checkout =
            #"{"id":"cs_far","object":"checkout.session","mode":"subscription","payment_status":"paid","client_reference_id":"\#(user)","customer":"cus_far","subscription":"sub_far","metadata":{"priceId":"price_basic_monthly"}}"#
        let lines =
            #"[{"price":{"id":"price_basic_monthly"},"period":{"start":\#(base),"end":\#(base + 60)}},{"price":{"id":"price_basic_monthly"},"period":{"start":\#(base),"end":9223372036854775807}}]"#
        let invoice =
            #"{"id":"in_far","object":"invoice","billing_reason":"subscription_cycle","customer":"cus_far","subscription":"sub_far","lines":{"data":\#(lines)}}"#
        let update =
            #"{"id":"sub_far","object":"subscription","status":"active","customer":"cus_far","items":{"data":[{"price":{"id":"price_basic_monthly"},"current_period_end":-1}]}}"#
        let refused: [(String, String, String, Int64)] = [
            ("created", "checkout.session.completed", checkout, Int64.max), ("created", "checkout.session.completed", checkout, Int64.min),
            ("created", "checkout.session.completed", checkout, 4_102_444_801),
            ("lines.data[1].period.end", "invoice.paid", invoice, base),
            ("items.data[0].current_period_end", "customer.subscription.updated", update, base),
        ]
        for (index, (field, type, object, created)) in refused.enumerated() {
            let event =
                #"{"id":"evt_far\#(index)","object":"event","type":"\#(type)","created":\#(created),"livemode":false,"data":{"object":\#(object)}}"#
            let answer = try await client.stripe(event, at: now)
            #expect(answer.status == .badRequest && String(buffer: answer.body).contains("\(field) is out of range"), "\(field): \(answer.status)")
        }
        #expect(try await app.rows("SELECT id FROM billing_events WHERE external_id LIKE 'evt_far%'").isEmpty)
        #expect(try await client.subscription(token).isEntitled == false)
        // An unmatched refund stored before dates were checked (its date made out of range in place) stays unapplied
        // when its checkout completes, as one arriving now is refused.
        let refund = #"{"id":"ch_far","object":"charge","amount":1499,"amount_refunded":1499,"payment_intent":"pi_far"}"#
        func refundEvent(created: Int64) -> String {
            #"{"id":"evt_old_r","object":"event","type":"charge.refunded","created":\#(created),"livemode":false,"data":{"object":\#(refund)}}"#
        }
        #expect(try await outcome(refundEvent(created: base), at: now) == "unmatched")
        try await app.write("UPDATE billing_events SET raw = ? WHERE external_id = 'evt_old_r'", [refundEvent(created: Int64.max)])
        let pack = stripeEvent(
            "evt_old_c", "checkout.session.completed", created: now,
            #"{"id":"cs_old","object":"checkout.session","mode":"payment","payment_status":"paid","client_reference_id":"\#(user)","payment_intent":"pi_far","metadata":{"priceId":"price_tokens_25"}}"#
        )
        #expect(try await outcome(pack, at: now) == "applied")
        #expect(try await client.balance(token).purchasedTokens == 25)
        #expect(try await app.rows("SELECT verdict FROM billing_events WHERE external_id = 'evt_old_r'").first?.string("verdict") == "unmatched")
    }

    /// A subscription checkout starts the plan; the first invoice adds nothing; a cycle invoice that arrives after a newer
    /// update is stale but still grants its period once; deletion ends access.
    mutating func subscriptionsFollowTheirEventsInAnyOrder() async throws {
        let subCheckout = stripeEvent(
            "evt_5", "checkout.session.completed", created: now.addingTimeInterval(30),
            #"{"id":"cs_3","object":"checkout.session","mode":"subscription","payment_status":"paid","client_reference_id":"\#(user)","customer":"cus_1","subscription":"sub_1","invoice":"in_0","metadata":{"priceId":"price_basic_monthly"}}"#
        )
        #expect(try await outcome(subCheckout, at: now) == "applied")
        let started = try await client.subscription(token)
        #expect(started.planId == "basic_monthly" && started.isEntitled)
        #expect(try await client.balance(token).subscriptionTokens == 50)
        let firstInvoice = stripeEvent(
            "evt_6", "invoice.paid", created: now.addingTimeInterval(29),
            #"{"id":"in_0","object":"invoice","billing_reason":"subscription_create","customer":"cus_1","subscription":"sub_1","lines":{"data":[{"price":{"id":"price_basic_monthly"},"period":{"start":\#(Int64(now.timeIntervalSince1970)),"end":\#(Int64(now.timeIntervalSince1970) + 2_592_000)}}]}}"#
        )
        #expect(try await outcome(firstInvoice, at: now) == "acknowledged")
        let periodStart = Int64(now.timeIntervalSince1970) + 2_592_000
        app.clock.set(Date(timeIntervalSince1970: Double(periodStart + 60)))
        // Sessions idle out over a month: sign in again.
        token = try await client.signIn("stripe@example.com", "correct horse battery").json(SeedSignInResponse.self).session.token
        later = app.clock.now()
        // Basil shape: subscription under parent.subscription_details, price under pricing.price_details.
        let cycle = stripeEvent(
            "evt_7", "invoice.paid", created: Date(timeIntervalSince1970: Double(periodStart)),
            #"{"id":"in_1","object":"invoice","billing_reason":"subscription_cycle","customer":"cus_1","parent":{"subscription_details":{"subscription":"sub_1"}},"lines":{"data":[{"pricing":{"price_details":{"price":"price_basic_monthly"}},"period":{"start":\#(periodStart),"end":\#(periodStart + 2_592_000)}}]}}"#
        )
        let cancel = stripeEvent(
            "evt_8", "customer.subscription.updated", created: Date(timeIntervalSince1970: Double(periodStart + 5)),
            #"{"id":"sub_1","object":"subscription","status":"active","cancel_at_period_end":true,"customer":"cus_1","items":{"data":[{"price":{"id":"price_basic_monthly"},"current_period_end":\#(periodStart + 2_592_000)}]}}"#
        )
        #expect(try await outcome(cancel, at: later) == "applied")
        #expect(try await outcome(cycle, at: later) == "stale")
        #expect(try await outcome(cycle, at: later) == "duplicate")
        #expect(try await client.balance(token).subscriptionTokens == 100)
        #expect(try await client.subscription(token).willRenew == false)
        let deleted = stripeEvent(
            "evt_9", "customer.subscription.deleted", created: Date(timeIntervalSince1970: Double(periodStart + 10)),
            #"{"id":"sub_1","object":"subscription","status":"canceled","customer":"cus_1"}"#)
        #expect(try await outcome(deleted, at: later) == "applied")
        #expect(try await client.subscription(token).isEntitled == false)
    }

    /// Unhandled types are stored and acknowledged; malformed events are refused; operators see every event; the books balance.
    func everythingIsOnRecord() async throws {
        #expect(try await outcome(stripeEvent("evt_10", "customer.created", created: later, #"{"id":"cus_2"}"#), at: later) == "acknowledged")
        #expect(try await client.stripe(#"{"not":"an event"}"#, at: later).status == .badRequest)
        let admin = try await app.apiKey(["admin"])
        let mine = try await client.get("/api/admin/billing/events?userId=\(user)&provider=stripe&limit=200", token: admin).json(EventsBody.self)
        #expect(mine.events.count >= 9 && mine.events.allSatisfy { $0.provider == "stripe" && $0.userId == user })
        let verify = try await client.get("/api/admin/ledger/verify", token: admin)
        #expect(verify.status == .ok && verify.text.contains(#""ok":true"#))
    }
}

/// Events of one story sent 10 s apart, from 20 s after its start (ids `evt_<tag><seconds>`); `send` answers each outcome.
final class StripeSequence {
    let story: StripeStory
    let tag: String
    var second = 10.0

    init(_ story: StripeStory, tag: String) { (self.story, self.tag) = (story, tag) }

    func send(_ type: String, _ object: String) async throws -> String {
        second += 10
        let at = story.now.addingTimeInterval(second)
        return try await story.outcome(stripeEvent("evt_\(tag)\(Int(second))", type, created: at, object), at: at)
    }
}
