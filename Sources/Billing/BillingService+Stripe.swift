import Clock
import Entitlements
import Foundation
import Ledger
import Logging
import SafeJSON
import Storage

/// The parts of a Stripe event this service reads. Fields that Stripe may expand into objects (customer,
/// subscription, invoice, price) are read as ids either way; both the pre- and post-2025-03-31 (basil) shapes
/// of invoices and subscriptions are understood.
struct StripeEvent: Decodable {
    let id: String
    let type: String
    let created: Int64
    let livemode: Bool?
    let data: DataField
    struct DataField: Decodable { let object: StripeObject }

    /// Every date the event carries that this service reads, by its path; each must lie in ``ProviderDates/seconds``.
    var dates: [(String, Int64?)] {
        let object = data.object
        var named: [(String, Int64?)] = [
            ("created", created), ("current_period_start", object.current_period_start), ("current_period_end", object.current_period_end),
        ]
        for (list, items) in [("lines", object.lines), ("items", object.items), ("line_items", object.line_items)] {
            for (index, item) in (items?.data ?? []).enumerated() {
                named += [
                    ("\(list).data[\(index)].period.start", item.period?.start), ("\(list).data[\(index)].period.end", item.period?.end),
                    ("\(list).data[\(index)].current_period_start", item.current_period_start),
                    ("\(list).data[\(index)].current_period_end", item.current_period_end),
                ]
            }
        }
        return named
    }
}

struct StripeID: Decodable {
    let value: String
    init(from decoder: any Decoder) throws {
        if let text = try? decoder.singleValueContainer().decode(String.self) { value = text; return }
        struct Expanded: Decodable { let id: String }
        value = try Expanded(from: decoder).id
    }
}

struct StripeList<Item: Decodable>: Decodable { let data: [Item]? }
struct StripePrice: Decodable { let id: String? }
struct StripePeriod: Decodable { let start: Int64?; let end: Int64? }
struct StripeLineItem: Decodable {
    let price: StripeID?
    let quantity: Int?
    let period: StripePeriod?
    let pricing: Pricing?
    let current_period_start: Int64?
    let current_period_end: Int64?
    struct Pricing: Decodable { let price_details: Details?; struct Details: Decodable { let price: StripeID? } }
    var priceID: String? { price?.value ?? pricing?.price_details?.price?.value }
}

struct StripeObject: Decodable {
    let id: String?
    let object: String?
    // checkout.session
    let mode: String?
    let client_reference_id: String?
    let customer: StripeID?
    let subscription: StripeID?
    let payment_intent: StripeID?
    let payment_status: String?
    let metadata: [String: String]?
    let line_items: StripeList<StripeLineItem>?
    let invoice: StripeID?
    // invoice
    let billing_reason: String?
    let lines: StripeList<StripeLineItem>?
    let parent: Parent?
    // subscription
    let status: String?
    let cancel_at_period_end: Bool?
    let items: StripeList<StripeLineItem>?
    let current_period_start: Int64?
    let current_period_end: Int64?
    // charge (and dispute)
    let amount: Int64?
    let amount_refunded: Int64?
    // invoice_payment (API 2025-03-31.basil on: invoices and charges no longer name each other)
    let payment: Payment?
    struct Payment: Decodable { let payment_intent: StripeID? }

    struct Parent: Decodable {
        let subscription_details: Details?
        struct Details: Decodable { let subscription: StripeID? }
    }

    var subscriptionID: String? { subscription?.value ?? parent?.subscription_details?.subscription?.value }
    /// What the event is stored under (`billing_events.original_id`): its subscription, else its payment, else its customer.
    var eventKey: String? { subscriptionID ?? payment_intent?.value ?? invoice?.value ?? customer?.value }
    var firstPriceID: String? {
        metadata?["priceId"] ?? line_items?.data?.first?.priceID ?? lines?.data?.first?.priceID ?? items?.data?.first?.priceID
    }
}

extension BillingService {
    public func requireStripe() throws(BillingError) -> StripeSignatureVerifier {
        guard let stripe else { throw .notConfigured("Stripe billing is not configured (STRIPE_WEBHOOK_SECRET).") }
        return stripe
    }

    /// Checks `Stripe-Signature` over the raw body bytes.
    public func verifyStripe(rawBody: [UInt8], header: String?) throws(BillingError) {
        let stripe = try requireStripe()
        do { try stripe.verify(rawBody: rawBody, header: header, now: clock.now()) } catch { throw .stripe(error) }
    }

    /// `POST /api/webhooks/stripe` after the signature check: stored once per event id and applied in the same transaction.
    public func handleStripeEvent(_ tx: any SQLExecutor, raw: String) async throws -> BillingVerdict {
        let event: StripeEvent
        do { event = try UntrustedJSON.decode(StripeEvent.self, from: Data(raw.utf8)) } catch {
            throw BillingError.malformed("The body is not a Stripe event (id, type, created, data.object).")
        }
        if let name = ProviderDates.firstOutside(ProviderDates.seconds, event.dates) {
            throw BillingError.malformed("The event's \(name) is out of range (1970 to 2100).")
        }
        let object = event.data.object
        let originalID = object.eventKey
        guard
            let eventID = try await claim(
                tx, provider: "stripe", source: "webhook", dedupeKey: "stripe:\(event.id)", externalID: event.id, eventType: event.type,
                originalID: originalID, environment: event.livemode == false ? "test" : "live",
                signedAt: Date(timeIntervalSince1970: Double(event.created)),
                raw: raw)
        else { return BillingVerdict(outcome: .duplicate, detail: "already received; no effect", userID: nil) }
        let verdict = try await applyStripe(tx, event)
        try await settle(tx, eventID: eventID, verdict)
        return verdict
    }

    func applyStripe(_ tx: any SQLExecutor, _ event: StripeEvent) async throws -> BillingVerdict {
        let object = event.data.object
        let at = Date(timeIntervalSince1970: Double(event.created))
        let machineID = "event:\(event.id)"
        switch event.type {
        case "checkout.session.completed", "checkout.session.async_payment_succeeded":
            return try await completeCheckout(tx, event)
        case "invoice.paid":
            guard let userID = try await stripeOwner(tx, object) else { return Self.unmatched }
            guard let invoiceID = object.id else { return BillingVerdict(outcome: .ignored, detail: "invoice without id", userID: userID) }
            if let reason = object.billing_reason, reason == "subscription_create" || reason == "subscription_update" {
                // Before API basil the invoice names its payment intent, the one thing a dispute of it names.
                // Its period not recorded yet (the checkout comes later): stored, and replayed by the checkout.
                if let intent = object.payment_intent?.value, try await linkPayment(tx, invoiceID: invoiceID, intent: intent) == nil,
                    reason == "subscription_create"
                {
                    return Self.unmatched
                }
                return .acknowledged("\(reason) invoice: the checkout or plan change already started the period", user: userID)
            }
            guard let priceID = object.firstPriceID, let plan = catalog.plans.first(where: { $0.stripePriceId == priceID }) else {
                return BillingVerdict(outcome: .ignored, detail: "no plan for the invoice's price", userID: userID)
            }
            let line = object.lines?.data?.first
            let start = Date(timeIntervalSince1970: Double(line?.period?.start ?? event.created))
            let end = line?.period?.end.map { Date(timeIntervalSince1970: Double($0)) }
            let event = try await periodEvent(
                tx, userID: userID, plan: plan, provider: .stripe, providerSubscriptionID: object.subscriptionID ?? "", start: start, end: end,
                trial: false)
            let verdict = try await applyMachine(
                tx, provider: .stripe, eventID: "invoice:\(invoiceID)", userID: userID, at: at, event, providerSubscriptionID: object.subscriptionID)
            if verdict.outcome == .applied || verdict.outcome == .stale {
                // Kept under the payment intent where the invoice names it (before API basil), which a refund and a
                // dispute of the charge both name; else under the invoice, until `invoice_payment.paid` names it.
                try await recordPeriod(
                    tx, provider: "stripe", sourceID: "invoice:\(invoiceID)", userID: userID, planID: plan.id,
                    paymentRef: object.payment_intent?.value ?? invoiceID, start: start)
                // A refund or the payment's record that arrived before this invoice (stored as unmatched) applies now.
                try await replayUnmatchedStripe(tx, keys: [invoiceID, object.payment_intent?.value])
            }
            return verdict
        case "invoice_payment.paid":
            return try await recordInvoicePayment(tx, object)
        case "customer.subscription.updated":
            return try await subscriptionUpdated(tx, object, machineID: machineID, at: at)
        case "customer.subscription.deleted":
            guard let userID = try await stripeOwner(tx, object) else { return Self.unmatched }
            let current = try await machine.lockedSubscription(userID: userID, tx)
            if let other = Self.anotherSubscription(current, object) { return .acknowledged(other, user: userID) }
            return try await applyMachine(tx, provider: .stripe, eventID: machineID, userID: userID, at: at, .expire)
        case "charge.refunded":
            return try await refundCharge(tx, object, machineID: machineID, at: at)
        case "charge.dispute.funds_withdrawn":
            // A dispute withdrew the charge's funds: what the charge granted is taken back, as a full refund does
            // (Stripe sends no `charge.refunded` for it). The dispute carries the charge's payment intent and amount.
            return try await refundCharge(tx, object, machineID: machineID, at: at, dispute: object.id ?? machineID)
        case "charge.dispute.funds_reinstated":
            // The merchant won the dispute: the funds, and what the dispute took back, return.
            return try await reinstateCharge(tx, object, machineID: machineID, at: at)
        default:
            return .acknowledged("\(event.type) is stored, no effect")
        }
    }

    /// `customer.subscription.updated`: a plan change, renewal intent or status of the account's current subscription.
    func subscriptionUpdated(_ tx: any SQLExecutor, _ object: StripeObject, machineID: String, at: Date) async throws -> BillingVerdict {
        guard let userID = try await stripeOwner(tx, object) else { return Self.unmatched }
        let current = try await machine.lockedSubscription(userID: userID, tx)
        if let other = Self.anotherSubscription(current, object) { return .acknowledged(other, user: userID) }
        switch object.status {
        case "active", "trialing":
            // A plan change applies only to a subscription that still grants access: one refunded (ended) stays ended,
            // though Stripe's own subscription goes on (a switch brought access back and topped up the refunded period).
            if let priceID = object.firstPriceID, let plan = catalog.plans.first(where: { $0.stripePriceId == priceID }), let current,
                plan.id != current.planID, current.isEntitled(at: clock.now())
            {
                let item = object.items?.data?.first
                let end = (item?.current_period_end ?? object.current_period_end).map { Date(timeIntervalSince1970: Double($0)) }
                let changed = try await applyMachine(
                    tx, provider: .stripe, eventID: machineID, userID: userID, at: at, .changePlanNow(planID: plan.id, periodEnd: end))
                _ = try await applyMachine(
                    tx, provider: .stripe, eventID: machineID + ":renew", userID: userID, at: at,
                    .setWillRenew(!(object.cancel_at_period_end ?? false)))
                return changed
            }
            return try await applyMachine(
                tx, provider: .stripe, eventID: machineID, userID: userID, at: at, .setWillRenew(!(object.cancel_at_period_end ?? false)))
        case "past_due", "unpaid":
            return try await applyMachine(tx, provider: .stripe, eventID: machineID, userID: userID, at: at, .pastDue)
        case "canceled", "incomplete_expired":
            return try await applyMachine(tx, provider: .stripe, eventID: machineID, userID: userID, at: at, .expire)
        default:
            return .acknowledged("subscription status \(object.status ?? "missing"): no change", user: userID)
        }
    }

    /// `invoice_payment.paid` (API 2025-03-31.basil on): the payment intent that paid an invoice. Its charge names only
    /// that payment intent, so a subscription period's record (kept under its invoice) now answers to the payment intent
    /// (which older charges name too); a refund of it that came first applies now. Before, such a refund matched nothing
    /// and was never applied: access and tokens stayed.
    func recordInvoicePayment(_ tx: any SQLExecutor, _ object: StripeObject) async throws -> BillingVerdict {
        guard let invoiceID = object.invoice?.value, let intent = object.payment?.payment_intent?.value else {
            return .acknowledged("invoice payment without an invoice or a payment intent: no effect")
        }
        guard let userID = try await linkPayment(tx, invoiceID: invoiceID, intent: intent) else {
            return BillingVerdict(
                outcome: .unmatched, detail: "no subscription payment recorded for this invoice yet; applied when it is", userID: nil)
        }
        return BillingVerdict(outcome: .applied, detail: "invoice \(invoiceID) was paid by \(intent)", userID: userID)
    }

    /// Keys the period recorded under `invoiceID` by the payment intent that paid it (a refund names either, a lost
    /// dispute only the payment intent), then applies a refund or dispute of it that came first. The period's user, or
    /// nil when none is recorded under the invoice (yet).
    func linkPayment(_ tx: any SQLExecutor, invoiceID: String, intent: String) async throws -> String? {
        let updated = try await tx.query(
            """
            UPDATE billing_grants SET payment_ref = ?, updated_at_ms = ? WHERE provider = 'stripe' AND kind = 'period' AND payment_ref = ?
            RETURNING user_id
            """, [intent, clock.now(), invoiceID])
        guard let userID = try updated.first?.string("user_id") else { return nil }
        try await replayUnmatchedStripe(tx, keys: [intent])
        return userID
    }

    /// For an event about a Stripe subscription: nil when it is the account's current subscription, else why it is not
    /// applied. An event of another subscription (an earlier Stripe one, or the account's App Store subscription or comp
    /// now) never changes, ends or renews the current one; toggling an old one's renewal moved the account's last event
    /// time, so a refund of the current one arrived stale.
    static func anotherSubscription(_ current: Subscription?, _ object: StripeObject) -> String? {
        guard let current, current.provider != .stripe || current.providerSubscriptionID != object.id else { return nil }
        return "the event concerns another subscription than the account's current one"
    }

    static let unmatched = BillingVerdict(
        outcome: .unmatched, detail: "no account for this subscription or customer yet; applied when its checkout completes", userID: nil)

    func stripeOwner(_ tx: any SQLExecutor, _ object: StripeObject) async throws -> String? {
        if let sub = object.object == "subscription" ? object.id : object.subscriptionID,
            let user = try await boundUser(tx, provider: "stripe", externalID: "sub:\(sub)")
        {
            return user
        }
        if let customer = object.customer?.value { return try await boundUser(tx, provider: "stripe", externalID: "cus:\(customer)") }
        return nil
    }

    /// A completed checkout: binds the customer and subscription to `client_reference_id`, then grants the token
    /// pack (payment mode, once per session) or starts the plan (subscription mode), then applies events for
    /// this purchase that arrived before it.
    func completeCheckout(_ tx: any SQLExecutor, _ event: StripeEvent) async throws -> BillingVerdict {
        let session = event.data.object
        guard let sessionID = session.id else { throw BillingError.malformed("The checkout session has no id.") }
        guard let userID = try await existingUser(tx, session.client_reference_id) else {
            return BillingVerdict(outcome: .ignored, detail: "client_reference_id is not a known account", userID: nil)
        }
        guard session.payment_status == "paid" || session.payment_status == "no_payment_required" else {
            return BillingVerdict(outcome: .ignored, detail: "payment_status \(session.payment_status ?? "missing"): not paid yet", userID: userID)
        }
        do {
            // Both binding locks first, the subscription's before the customer's: the order in which an event looks them
            // up (``stripeOwner``). Then the customer is bound first, so a customer of another account binds nothing.
            if let sub = session.subscriptionID { try await lockBinding(tx, provider: "stripe", externalID: "sub:\(sub)") }
            if let customer = session.customer?.value {
                try await lockBinding(tx, provider: "stripe", externalID: "cus:\(customer)")
                _ = try await bind(tx, provider: "stripe", externalID: "cus:\(customer)", userID: userID, environment: nil)
            }
            if let sub = session.subscriptionID {
                _ = try await bind(tx, provider: "stripe", externalID: "sub:\(sub)", userID: userID, environment: nil)
            }
        } catch BillingError.boundToAnotherAccount {
            return BillingVerdict(outcome: .conflict, detail: "the Stripe customer or subscription belongs to another account", userID: nil)
        }
        let verdict: BillingVerdict
        let priceID = session.firstPriceID
        if session.mode == "subscription" {
            guard let priceID, let plan = catalog.plans.first(where: { $0.stripePriceId == priceID }) else {
                return BillingVerdict(outcome: .ignored, detail: "no plan for price \(priceID ?? "missing")", userID: userID)
            }
            let start = Date(timeIntervalSince1970: Double(event.created))
            // Nothing paid: a trial (the plan's `trialDays`, status `trialing`), as an App Store free trial is; the first
            // paid invoice starts the first paid period. Before, a trial checkout was a paid month of access.
            let trial = session.payment_status == "no_payment_required"
            verdict = try await applyMachine(
                tx, provider: .stripe, eventID: "checkout:\(sessionID)", userID: userID, at: start,
                .start(planID: plan.id, periodStart: start, periodEnd: nil, trial: trial, willRenew: true),
                providerSubscriptionID: session.subscriptionID, providerCustomerID: session.customer?.value)
            if verdict.outcome == .applied || verdict.outcome == .stale {
                try await recordPeriod(
                    tx, provider: "stripe", sourceID: "checkout:\(sessionID)", userID: userID, planID: plan.id, paymentRef: session.invoice?.value,
                    start: start)
            }
        } else {
            guard let priceID, let pack = catalog.tokenPacks.first(where: { $0.stripePriceId == priceID }) else {
                return BillingVerdict(outcome: .ignored, detail: "no token pack for price \(priceID ?? "missing")", userID: userID)
            }
            verdict = try await grantPack(
                tx, provider: "stripe", sourceID: "checkout:\(sessionID)", userID: userID, pack: pack,
                quantity: session.line_items?.data?.first?.quantity ?? 1, paymentRef: session.payment_intent?.value)
        }
        try await replayUnmatchedStripe(
            tx, keys: [session.subscriptionID, session.payment_intent?.value, session.invoice?.value, session.customer?.value])
        return verdict
    }

    /// A refund takes back, pro rata and cumulatively, what the refunded payment granted: a token pack's tokens,
    /// or (fully refunded) a subscription period through the state machine. `dispute`: the dispute whose withdrawal this
    /// is (recorded with what it takes, all its reinstatement gives back).
    func refundCharge(
        _ tx: any SQLExecutor, _ charge: StripeObject, machineID: String, at: Date, dispute: String? = nil
    ) async throws -> BillingVerdict {
        guard charge.payment_intent != nil || charge.invoice != nil, let amount = charge.amount, amount > 0 else {
            return .acknowledged("charge without payment reference or amount")
        }
        guard let grant = try await recordedGrant(tx, paidBy: charge) else { return Self.paymentNotRecordedYet }
        let refunded = min(charge.amount_refunded ?? amount, amount)
        let userID = try grant.string("user_id")
        // A reinstatement sent after this withdrawal but received first: the merchant has the funds back.
        if dispute != nil, try await disputeEvent(tx, charge, type: "charge.dispute.funds_reinstated", since: at) {
            return BillingVerdict(
                outcome: .ignored, detail: "the dispute was won before its withdrawal arrived: nothing is taken back", userID: userID)
        }
        if try grant.string("kind") == "tokens" {
            return try await clawPack(
                tx, provider: "stripe", sourceID: try grant.string("source_id"), share: Share.of(refunded, in: amount), disputed: dispute != nil)
                ?? BillingVerdict(outcome: .ignored, detail: "no grant", userID: userID)
        }
        guard refunded == amount else {
            return .acknowledged("partial refund of a subscription payment: access and tokens unchanged", user: userID)
        }
        return try await applyMachine(
            tx, provider: .stripe, eventID: machineID, userID: userID, at: at,
            .refund(periodKey: grant.optionalString("period_key"), dispute: dispute.map { "stripe:\($0)" }))
    }

    /// A dispute the merchant won (`charge.dispute.funds_reinstated`): what its own withdrawal took back returns, once (a
    /// pack's tokens; a period's tokens, and access if it is the current period); never what a refund took.
    func reinstateCharge(_ tx: any SQLExecutor, _ dispute: StripeObject, machineID: String, at: Date) async throws -> BillingVerdict {
        guard let grant = try await recordedGrant(tx, paidBy: dispute) else { return Self.paymentNotRecordedYet }
        let userID = try grant.string("user_id")
        if try grant.string("kind") == "tokens" {
            // A pack records what disputes took, not which: only a dispute whose own withdrawal took something gives back.
            guard try await disputeEvent(tx, dispute, type: "charge.dispute.funds_withdrawn", applied: true) else {
                return BillingVerdict(outcome: .ignored, detail: "this dispute's withdrawal took nothing back", userID: userID)
            }
            return try await restoreDisputed(tx, sourceID: try grant.string("source_id"), userID: userID)
        }
        return try await applyMachine(
            tx, provider: .stripe, eventID: machineID, userID: userID, at: at,
            .reverseRefund(periodKey: grant.optionalString("period_key"), periodEnd: nil, dispute: "stripe:\(dispute.id ?? machineID)"))
    }

    /// The purchase a charge or dispute paid for: the grant recorded under its payment intent, else under its invoice. Its
    /// row is then locked (by its key: `payment_ref` may be moving from the invoice to the payment intent under a
    /// concurrent `invoice.paid`), so that the events of one payment (a dispute's withdrawal and its reinstatement) take
    /// effect one after the other, each seeing what the other did.
    func recordedGrant(_ tx: any SQLExecutor, paidBy object: StripeObject) async throws -> SQLRow? {
        for ref in [object.payment_intent?.value, object.invoice?.value].compactMap({ $0 }) {
            guard let found = try await tx.first("SELECT source_id FROM billing_grants WHERE provider = 'stripe' AND payment_ref = ?", [ref]) else {
                continue
            }
            return try await tx.first(
                "SELECT * FROM billing_grants WHERE provider = 'stripe' AND source_id = ?" + tx.dialect.forUpdate, [try found.string("source_id")])
        }
        return nil
    }

    /// Whether an event of `type` about this dispute is stored (`since`: sent at or after that time; `applied`: it took
    /// effect). Stripe does not promise the order of a dispute's `funds_withdrawn` and `funds_reinstated` (a failed
    /// delivery is retried hours later), so each asks about the other.
    func disputeEvent(_ tx: any SQLExecutor, _ dispute: StripeObject, type: String, since: Date? = nil, applied: Bool = false) async throws -> Bool {
        guard let id = dispute.id, let key = dispute.eventKey else { return false }
        let rows = try await tx.query(
            """
            SELECT raw FROM billing_events WHERE provider = 'stripe' AND event_type = ? AND original_id = ? AND signed_at_ms >= ?
            """ + (applied ? " AND verdict = 'applied'" : ""), [type, key, since ?? Date(timeIntervalSince1970: 0)])
        return rows.contains { row in
            (try? UntrustedJSON.decode(StripeEvent.self, from: Data(try row.string("raw").utf8)))?.data.object.id == id
        }
    }

    static let paymentNotRecordedYet = BillingVerdict(
        outcome: .unmatched, detail: "no purchase recorded for this payment yet; applied when its checkout completes", userID: nil)

    /// Stripe events stored as unmatched for these ids, applied now (oldest first).
    func replayUnmatchedStripe(_ tx: any SQLExecutor, keys: [String?]) async throws {
        for key in keys.compactMap({ $0 }) {
            let rows = try await tx.query(
                "SELECT id, raw FROM billing_events WHERE provider = 'stripe' AND original_id = ? AND verdict = 'unmatched' ORDER BY signed_at_ms, received_at_ms",
                [key])
            for row in rows {
                // Stored before dates were checked, an event out of range stays unapplied (as one arriving now is refused).
                guard let event = try? UntrustedJSON.decode(StripeEvent.self, from: Data(try row.string("raw").utf8)),
                    ProviderDates.firstOutside(ProviderDates.seconds, event.dates) == nil
                else { continue }
                let verdict = try await applyStripe(tx, event)
                guard verdict.outcome != .unmatched else { continue }
                try await settle(
                    tx, eventID: try row.string("id"),
                    BillingVerdict(outcome: verdict.outcome, detail: "replayed: \(verdict.detail ?? "")", userID: verdict.userID))
            }
        }
    }
}
