import Clock
import Events
import Foundation
import Ledger
import Storage

/// What a billing provider (or an operator) says happened to a subscription.
public enum SubscriptionEvent: Sendable, Equatable {
    /// A new subscription (or a resubscribe). `trial` periods last the plan's `trialDays` unless `periodEnd` says otherwise.
    case start(planID: String, periodStart: Date, periodEnd: Date?, trial: Bool, willRenew: Bool)
    /// A new billing period; a pending downgrade takes effect, or `planID` when the provider names the plan.
    case renew(periodStart: Date, periodEnd: Date, planID: String? = nil)
    /// A change that applies at once: with `periodStart`, a new period on the new plan (its tokens granted); without, the
    /// current period, topped up to the new plan's monthly tokens when it has more.
    case changePlanNow(planID: String, periodEnd: Date?, periodStart: Date? = nil)
    /// A downgrade (or crossgrade) at the next renewal.
    case changePlanAtRenewal(planID: String)
    /// Auto-renew turned off (access continues to the period end) or back on.
    case setWillRenew(Bool)
    /// Billing failed; access continues until `until`.
    case grace(until: Date)
    /// Billing failed with no grace period: back to the free plan until paid.
    case pastDue
    /// The subscription ended.
    case expire
    /// A paid period was refunded or revoked: its tokens are clawed back (once per period), and when it is the current
    /// period, access ends now. `periodKey`: the refunded payment's period (``SubscriptionMachine/periodKey(_:month:)`` of
    /// its start); nil: the current one.
    case refund(periodKey: String?, dispute: String? = nil)
    /// A period's refund was reversed: its clawed-back tokens return (once), and access when it is the current period,
    /// until `periodEnd` (the provider's; nil: the plan's interval from the period's start). `dispute`: a won dispute,
    /// which gives back only what its own withdrawal (``refund(periodKey:dispute:)``) took.
    case reverseRefund(periodKey: String?, periodEnd: Date?, dispute: String? = nil)

    /// When the period an event starts begins (nil: an event that starts none, or a change within the current period).
    var periodStart: Date? {
        switch self {
        case .start(_, let start, _, _, _), .renew(let start, _, _): start
        case .changePlanNow(_, _, let start): start
        default: nil
        }
    }

    /// The plan an event names.
    var planID: String? {
        switch self {
        case .changePlanNow(let planID, _, _): planID
        case .renew(_, _, let planID): planID
        default: nil
        }
    }

    var kind: String {
        switch self {
        case .start: "start"
        case .renew: "renew"
        case .changePlanNow: "change_plan_now"
        case .changePlanAtRenewal: "change_plan_at_renewal"
        case .setWillRenew: "set_will_renew"
        case .grace: "grace"
        case .pastDue: "past_due"
        case .expire: "expire"
        case .refund: "refund"
        case .reverseRefund: "reverse_refund"
        }
    }
}

/// The outcome of applying an event (stored in `subscription_events.outcome`).
public enum EventOutcome: String, Sendable, Equatable {
    case applied
    /// The same provider event id was applied before: nothing happened again.
    case duplicate
    /// Older than the newest applied event: recorded, its state change not applied (a late period's tokens and a late
    /// refund's clawback still are: see the detail).
    case stale
    /// Makes no sense in the current state (e.g. renew with no subscription): recorded, not applied.
    case ignored
}

/// What applying an event did: its outcome, a note for operators, and the tokens a refund clawed back.
public struct EventResult: Sendable, Equatable {
    public let outcome: EventOutcome
    public let detail: String?
    /// A refund's clawback (stored in `subscription_events.clawed_tokens`; a reversal gives back what the period's
    /// ledger rows record, ``Ledger/restorePeriod``).
    public let clawedTokens: Int64?

    /// False for a refund or reversal of a period other than the current one: it moves no state, so it does not become
    /// the newest event later ones are ordered against.
    let ordersState: Bool
    /// The event is not used up: a period ignored because its refund came first applies when it comes again (from
    /// reconciliation) once the refund is reversed.
    let releasesClaim: Bool

    init(_ outcome: EventOutcome, _ detail: String? = nil, clawedTokens: Int64? = nil, ordersState: Bool = true, releasesClaim: Bool = false) {
        self.outcome = outcome
        self.detail = detail
        self.clawedTokens = clawedTokens
        self.ordersState = ordersState
        self.releasesClaim = releasesClaim
    }
}

/// The provider's own ids for a subscription, recorded when an event that names them applies.
public struct ProviderBinding: Sendable, Equatable {
    public let subscriptionID: String?
    public let customerID: String?

    public init(subscriptionID: String?, customerID: String?) {
        self.subscriptionID = subscriptionID
        self.customerID = customerID
    }
}

/// The one entry point that changes subscriptions: provider events (``apply``), operator comps and ends, and the monthly
/// drip of yearly plans. Each event applies once per (provider, event id), in one transaction with its token effects
/// (periods through the ledger's exactly-once rollover path, keyed by ``periodKey(_:month:)``).
public struct SubscriptionMachine: Sendable {
    public let store: SubscriptionStore
    public let ledger: Ledger
    let clock: any TimeSource
    /// The audit log (Billing's repairs are audited through it too).
    public let audit: any AuditTrail
    /// Where `subscription.updated` is recorded (in the change's transaction).
    let events: any EventSink

    public init(
        store: SubscriptionStore, ledger: Ledger, clock: any TimeSource, audit: any AuditTrail = NoAuditTrail(), events: any EventSink = NoEvents()
    ) {
        self.store = store
        self.ledger = ledger
        self.clock = clock
        self.audit = audit
        self.events = events
    }

    public func apply(
        _ tx: any SQLExecutor, provider: SubscriptionProvider, eventID: String, userID: String, occurredAt: Date, event: SubscriptionEvent,
        binding: ProviderBinding? = nil, familyShared: Bool = false
    ) async throws -> EventResult {
        let now = clock.now()
        // The user's ledger locks before the claim, as every caller that reads the subscription first takes them: a claim
        // taken first waited on those locks while their holder waited on the claim (the same refund, from a notification
        // and from reconciliation).
        try await ledger.lockAccountsFirst(tx, userID: userID, creating: true)
        let claimed = try await tx.query(
            """
            INSERT INTO subscription_events (provider, event_id, user_id, kind, occurred_at_ms, outcome, recorded_at_ms) VALUES (?, ?, ?, ?, ?, 'pending', ?)
            ON CONFLICT (provider, event_id) DO NOTHING RETURNING event_id
            """, [provider.rawValue, eventID, userID, event.kind, occurredAt, now])
        guard !claimed.isEmpty else {
            let earlier = try await tx.first(
                "SELECT detail FROM subscription_events WHERE provider = ? AND event_id = ?", [provider.rawValue, eventID])
            return EventResult(.duplicate, earlier?.optionalString("detail") ?? "\(event.kind) duplicate")
        }
        let current = try await lockedSubscription(userID: userID, tx)
        let lastEvent = try await tx.first("SELECT last_event_at_ms FROM subscriptions WHERE user_id = ?", [userID])?.optionalDate("last_event_at_ms")
        var result: EventResult
        // The event names the current subscription (the provider's id for it is the one on record).
        let same = binding?.subscriptionID != nil && binding?.subscriptionID == current?.providerSubscriptionID
        if let lastEvent, occurredAt < lastEvent {
            result = try await late(
                tx, provider: provider, userID: userID, current: current, event: event, at: occurredAt, sameSubscription: same,
                familyShared: familyShared)
            try await emitChange(tx, userID: userID, before: current, cause: "\(provider.rawValue).\(event.kind)", now: now)
        } else {
            result = try await transition(
                tx, provider: provider, userID: userID, current: current, event: event, at: occurredAt, familyShared: familyShared,
                sameSubscription: same)
            if result.outcome == .applied {
                // Any applied event may change what the yearly drip owes: due again now (``dripYearlyPlans``).
                // A refund or reversal of another period than the current one leaves the ordering alone: the current
                // period's own events, signed before it, are not stale.
                try await tx.query(
                    "UPDATE subscriptions SET last_event_at_ms = ?, updated_at_ms = ?, next_drip_at_ms = 0 WHERE user_id = ?",
                    [result.ordersState ? occurredAt : lastEvent ?? occurredAt, now, userID])
                if let binding { try await bind(tx, userID: userID, binding) }
                try await emitChange(tx, userID: userID, before: current, cause: "\(provider.rawValue).\(event.kind)", now: now)
            }
        }
        if result.releasesClaim {
            try await tx.query("DELETE FROM subscription_events WHERE provider = ? AND event_id = ?", [provider.rawValue, eventID])
        } else {
            try await tx.query(
                "UPDATE subscription_events SET outcome = ?, detail = ?, clawed_tokens = ?, orders_state = ? WHERE provider = ? AND event_id = ?",
                [result.outcome.rawValue, result.detail, result.clawedTokens, result.ordersState, provider.rawValue, eventID])
        }
        return EventResult(result.outcome, result.detail ?? "\(event.kind) \(result.outcome.rawValue)", clawedTokens: result.clawedTokens)
    }

    /// The user's subscription, read under the user's ledger locks (``Ledger/lockAccountsFirst(_:userID:)``). Everything that
    /// may change a subscription reads it here first, so two events for one user (racing webhook deliveries, an operator's
    /// comp) apply one at a time, each deciding on what the one before it left: read unlocked, a newer event and an older
    /// one both passed the ordering check and the older could commit last. Read-only answers use the store directly.
    /// The user must exist (the accounts are created when missing).
    public func lockedSubscription(userID: String, _ tx: any SQLExecutor) async throws -> Subscription? {
        try await ledger.lockAccountsFirst(tx, userID: userID, creating: true)
        return try await store.subscription(userID: userID, tx)
    }

    /// Records the provider's ids of the user's subscription (kept when an event does not name them).
    func bind(_ tx: any SQLExecutor, userID: String, _ binding: ProviderBinding) async throws {
        guard binding.subscriptionID != nil || binding.customerID != nil else { return }
        try await tx.query(
            """
            UPDATE subscriptions SET provider_subscription_id = COALESCE(?, provider_subscription_id), provider_customer_id = COALESCE(?, provider_customer_id)
            WHERE user_id = ?
            """, [binding.subscriptionID, binding.customerID, userID])
    }

    func transition(
        _ tx: any SQLExecutor, provider: SubscriptionProvider, userID: String, current: Subscription?, event: SubscriptionEvent, at: Date,
        familyShared: Bool = false, sameSubscription: Bool = false
    ) async throws -> EventResult {
        switch event {
        case .start, .renew, .changePlanNow:
            try await periodTransition(
                tx, provider: provider, userID: userID, current: current, event: event, at: at, familyShared: familyShared,
                sameSubscription: sameSubscription)
        case .refund(let key, let dispute): try await refund(tx, userID: userID, current: current, periodKey: key, dispute: dispute, at: at)
        case .reverseRefund(let key, let end, let dispute):
            try await reverseRefund(
                tx, userID: userID, current: current, periodKey: key, dispute: dispute, restoreAccessUntil: accessEnd(end, current) ?? at, at: at)
        default: try await stateTransition(tx, userID: userID, current: current, event: event)
        }
    }

    /// Events that start a paid period: a start, a renewal, a plan change that applies now. `familyShared`: the period
    /// is a family member's through Apple Family Sharing (recorded on the subscription; see ``startPeriod``).
    func periodTransition(
        _ tx: any SQLExecutor, provider: SubscriptionProvider, userID: String, current: Subscription?, event: SubscriptionEvent, at: Date,
        familyShared: Bool, sameSubscription: Bool
    ) async throws -> EventResult {
        if let start = event.periodStart {
            // Its refund arrived first: the period grants neither tokens nor access.
            if try await ledger.isRefunded(tx, userID: userID, periodKey: Self.periodKey(start)) {
                return EventResult(
                    .ignored, "the period was refunded before it arrived (applied if it comes again after the refund is reversed)",
                    releasesClaim: true)
            }
            // A period that started before the current one of the same subscription (reconciliation repairs a renewal
            // months later, when its `at` is new): its tokens are granted, the current period is kept. Before, it moved
            // the subscription back to it. A start counts only when it names the current subscription.
            if let current, start < current.currentPeriodStart, event.kind != "start" || sameSubscription {
                guard try await periodTokensOnly(tx, userID: userID, current: current, planID: event.planID, start: start) else {
                    return EventResult(.ignored, "an earlier period than the current one, granted before")
                }
                return EventResult(.applied, "an earlier period: tokens granted, the current period kept", ordersState: false)
            }
        }
        switch event {
        case .start(let planID, let start, let end, let trial, let willRenew):
            let plan = try requirePlan(planID)
            let periodEnd = end ?? Self.defaultEnd(start: start, plan: plan, trial: trial)
            try await upsert(
                tx, userID: userID, planID: plan.id, status: trial ? .trialing : .active, provider: provider, start: start, end: periodEnd,
                willRenew: willRenew, pending: nil, familyShared: familyShared)
            try await startPeriod(tx, userID: userID, plan: plan, start: start)
        case .renew(let start, let end, let planID):
            guard let current else { return EventResult(.ignored, "no subscription to renew") }
            let plan = try requirePlan(planID ?? current.pendingPlanID ?? current.planID)
            try await upsert(
                tx, userID: userID, planID: plan.id, status: .active, provider: provider, start: start, end: end, willRenew: true, pending: nil,
                familyShared: familyShared)
            try await startPeriod(tx, userID: userID, plan: plan, start: start)
        case .changePlanNow(let planID, let end, let start):
            // A provider that starts a new period with the change (Apple's upgrade) names its start: its tokens are
            // granted. Otherwise (Stripe's proration) the change stays in the period already granted, which the new plan
            // only tops up to its own monthly tokens (``Ledger/topUpPeriod``): switching plans back and forth once granted
            // a whole month each time.
            guard let current else { return EventResult(.ignored, "no subscription to change") }
            let plan = try requirePlan(planID)
            let start = start ?? current.currentPeriodStart
            try await upsert(
                tx, userID: userID, planID: plan.id, status: .active, provider: provider, start: start, end: end ?? current.currentPeriodEnd,
                willRenew: current.willRenew, pending: nil, familyShared: familyShared)
            try await startPeriod(tx, userID: userID, plan: plan, start: start, topUp: true)
        default:
            preconditionFailure("not a period event: \(event.kind)")
        }
        return EventResult(.applied)
    }

    /// Events that change the record's state without a new period.
    func stateTransition(_ tx: any SQLExecutor, userID: String, current: Subscription?, event: SubscriptionEvent) async throws -> EventResult {
        guard let current else { return EventResult(.ignored, "no subscription") }
        switch event {
        case .changePlanAtRenewal(let planID):
            _ = try requirePlan(planID)
            // Renewing into the current plan cancels a pending change.
            try await tx.query("UPDATE subscriptions SET pending_plan_id = ? WHERE user_id = ?", [planID == current.planID ? nil : planID, userID])
        case .setWillRenew(let renew):
            try await tx.query("UPDATE subscriptions SET will_renew = ? WHERE user_id = ?", [renew, userID])
        case .grace(let until):
            try await tx.query("UPDATE subscriptions SET status = 'grace', current_period_end_ms = ? WHERE user_id = ?", [until, userID])
        case .pastDue:
            try await tx.query("UPDATE subscriptions SET status = 'past_due' WHERE user_id = ?", [userID])
        case .expire:
            try await tx.query("UPDATE subscriptions SET status = 'expired', will_renew = ? WHERE user_id = ?", [false, userID])
        default:
            preconditionFailure("not a state event: \(event.kind)")
        }
        return EventResult(.applied)
    }

    /// An event older than the newest applied one: recorded as stale, the newer state (plan, flags, status) kept. But
    /// a paid period and a refund are facts whenever they arrive: a late period's tokens are granted (once, by period
    /// key), a late refund's period is clawed back (and ends access if it is the current period), a late reversal gives
    /// its period's tokens back (access stays as the newer events left it). Before, a refund older than a
    /// renewal-status toggle was lost.
    func late(
        _ tx: any SQLExecutor, provider: SubscriptionProvider, userID: String, current: Subscription?, event: SubscriptionEvent, at: Date,
        sameSubscription: Bool = false, familyShared: Bool = false
    ) async throws -> EventResult {
        // A period whose refund came first is not used up here either (``periodTransition``).
        if let start = event.periodStart, try await ledger.isRefunded(tx, userID: userID, periodKey: Self.periodKey(start)) {
            return EventResult(
                .stale, "the period was refunded before it arrived (applied if it comes again after the refund is reversed)", releasesClaim: true)
        }
        switch event {
        case .renew(let start, _, let planID):
            guard let current, start > current.currentPeriodStart,
                try await periodTokensOnly(tx, userID: userID, current: current, planID: planID, start: start)
            else { return EventResult(.stale) }
            return EventResult(.stale, "late period: tokens granted, newer state kept")
        case .start(let planID, let start, _, let trial, _) where sameSubscription && !trial:
            // A paid period of the subscription, delivered after newer events; billing reports it as a start because the
            // record is no longer live. Ended by a newer expiry or failed payment (a renewal delivered after the
            // cancellation): its tokens only, as in the order it happened. Else (the record expired by a refund of an
            // earlier period, say) the period applies, access included; the newer events keep their order.
            guard let current, start > current.currentPeriodStart else { return EventResult(.stale) }
            let ended = try await tx.first(
                """
                SELECT event_id FROM subscription_events WHERE user_id = ? AND outcome = 'applied' AND occurred_at_ms > ? AND orders_state
                AND kind IN ('expire', 'past_due') LIMIT 1
                """, [userID, at])
            guard ended != nil else {
                let result = try await periodTransition(
                    tx, provider: provider, userID: userID, current: current, event: event, at: at, familyShared: familyShared,
                    sameSubscription: true)
                return EventResult(result.outcome, "late period that nothing newer ended: applied, access included")
            }
            guard try await periodTokensOnly(tx, userID: userID, current: current, planID: planID, start: start) else { return EventResult(.stale) }
            return EventResult(.stale, "late period of the ended subscription: tokens granted, newer state kept")
        case .refund(let key, let dispute):
            let result = try await refund(tx, userID: userID, current: current, periodKey: key, dispute: dispute, at: at)
            return EventResult(.stale, "late refund: \(result.detail ?? "")", clawedTokens: result.clawedTokens)
        case .reverseRefund(let key, let end, let dispute):
            // Access returns to a subscription the refund left expired, unless a newer event changed its state (an expiry,
            // a lapse, a new period); newer renewal toggles and pending plan changes do not count.
            let newer = try await tx.first(
                """
                SELECT event_id FROM subscription_events WHERE user_id = ? AND outcome = 'applied' AND occurred_at_ms > ? AND orders_state
                AND kind NOT IN ('set_will_renew', 'change_plan_at_renewal', 'reverse_refund') LIMIT 1
                """, [userID, at])
            let until = current?.status == .expired && newer == nil ? accessEnd(end, current) : nil
            let result = try await reverseRefund(
                tx, userID: userID, current: current, periodKey: key, dispute: dispute, restoreAccessUntil: until, at: at)
            return EventResult(.stale, "late refund reversal: \(result.detail ?? "")")
        default:
            return EventResult(.stale)
        }
    }

    /// Grants a paid period's tokens (once, by its key) without touching the subscription's state: a period other than
    /// the current one. False when nothing was granted (its plan is unknown or free, or it was granted or refunded before).
    func periodTokensOnly(_ tx: any SQLExecutor, userID: String, current: Subscription, planID: String?, start: Date) async throws -> Bool {
        guard let plan = store.catalog.plan(id: planID ?? current.pendingPlanID ?? current.planID), !plan.isFreeTier else { return false }
        return try await startPeriod(tx, userID: userID, plan: plan, start: start)
    }

    /// Where access returns to when a refund is reversed: the provider's period end, else the plan's interval from the
    /// current period's start (a year for a yearly plan).
    func accessEnd(_ providerEnd: Date?, _ current: Subscription?) -> Date? {
        providerEnd
            ?? current.flatMap { current in
                store.catalog.plan(id: current.planID).map { Self.defaultEnd(start: current.currentPeriodStart, plan: $0, trial: false) }
            }
    }

    /// The period starting under `periodKey` and its later months (``periodKey(_:month:)``).
    static func months(_ periodKey: String) -> Ledger.PeriodMonths {
        Ledger.PeriodMonths(key: periodKey, months: "\(periodKey):month:%")
    }

    /// A refunded period's tokens are clawed back, once (never below zero; the shortfall is noted). When it is the
    /// current period, access ends now; a refund of another payment leaves the current period alone.
    func refund(
        _ tx: any SQLExecutor, userID: String, current: Subscription?, periodKey: String?, dispute: String?, at: Date
    ) async throws -> EventResult {
        let currentKey = current.map { Self.periodKey($0.currentPeriodStart) }
        // With no subscription yet, a named period is still recorded as refunded: its purchase, verified later from a
        // transaction signed before the refund, grants nothing.
        guard let key = periodKey ?? currentKey else { return EventResult(.ignored, "no subscription") }
        guard
            let (clawed, shortfall) = try await ledger.refundPeriod(
                tx, userID: userID, period: Self.months(key), planID: current?.planID ?? store.catalog.freePlan.id, dispute: dispute)
        else {
            return EventResult(.ignored, "period \(key) was refunded before, or its refund reversed")
        }
        guard key == currentKey else {
            return EventResult(
                .applied, "clawed \(clawed) shortfall \(shortfall) (not the current period, which stays)", clawedTokens: clawed, ordersState: false)
        }
        try await tx.query(
            "UPDATE subscriptions SET status = 'expired', will_renew = ?, current_period_end_ms = ?, next_drip_at_ms = 0 WHERE user_id = ?",
            [false, at, userID])
        return EventResult(.applied, "clawed \(clawed) shortfall \(shortfall)", clawedTokens: clawed)
    }

    /// A reversed refund: the tokens its period's refund took return, once. With `restoreAccessUntil` and the current
    /// period, access returns until then (the provider's period end, else the end of the plan's interval from the period's
    /// start: a year for a yearly plan); without it (a late reversal), access stays as newer events left it.
    func reverseRefund(
        _ tx: any SQLExecutor, userID: String, current: Subscription?, periodKey: String?, dispute: String?, restoreAccessUntil: Date?, at: Date
    ) async throws -> EventResult {
        let currentKey = current.map { Self.periodKey($0.currentPeriodStart) }
        guard let key = periodKey ?? currentKey else { return EventResult(.ignored, "no subscription") }
        let restored: Int64
        switch try await ledger.restorePeriod(tx, userID: userID, period: Self.months(key), dispute: dispute) {
        case .restored(let tokens): restored = tokens
        case .markedReversed:
            return EventResult(
                .applied, "period \(key) had no refund to reverse: a refund of it arriving later takes nothing", ordersState: key == currentKey)
        case .unchanged: return EventResult(.ignored, "period \(key) has no refund to reverse")
        }
        if key == currentKey, let end = restoreAccessUntil {
            try await tx.query(
                "UPDATE subscriptions SET status = 'active', current_period_end_ms = ?, next_drip_at_ms = 0 WHERE user_id = ?",
                [max(end, at), userID])
        }
        return EventResult(.applied, "restored \(restored)", ordersState: key == currentKey)
    }

    /// `subscription.updated` with the old and new plan and status, when plan, status, renewal or pending plan changed.
    func emitChange(_ tx: any SQLExecutor, userID: String, before: Subscription?, cause: String, now: Date) async throws {
        let after = try await store.subscription(userID: userID, tx)
        func fields(_ subscription: Subscription?) -> EventValue {
            guard let subscription else { return .object(["planId": .string(store.catalog.freePlan.id), "status": .string("none")]) }
            return .object([
                "planId": .string(subscription.planID), "status": .string(subscription.status.rawValue), "willRenew": .bool(subscription.willRenew),
                "pendingPlanId": .optional(subscription.pendingPlanID), "provider": .string(subscription.provider.rawValue),
                "currentPeriodEnd": .date(subscription.currentPeriodEnd),
            ])
        }
        let old = fields(before)
        let new = fields(after)
        guard old != new else { return }
        try await events.emit(
            tx,
            DomainEvent(
                type: "subscription.updated", userID: userID, data: ["userId": .string(userID), "old": old, "new": new, "cause": .string(cause)]),
            at: now)
    }

    func requirePlan(_ id: String) throws -> SubscriptionPlan {
        guard let plan = store.catalog.plan(id: id), !plan.isFreeTier else { throw EntitlementError.invalid(["unknown or free plan '\(id)'"]) }
        return plan
    }

    func upsert(
        _ tx: any SQLExecutor, userID: String, planID: String, status: SubscriptionStatus, provider: SubscriptionProvider, start: Date, end: Date,
        willRenew: Bool, pending: String?, familyShared: Bool = false
    ) async throws {
        try await tx.query(
            """
            INSERT INTO subscriptions (user_id, plan_id, status, provider, current_period_start_ms, current_period_end_ms, will_renew, pending_plan_id,
                                       updated_at_ms, family_shared)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (user_id) DO UPDATE SET plan_id = excluded.plan_id, status = excluded.status, provider = excluded.provider,
                current_period_start_ms = excluded.current_period_start_ms, current_period_end_ms = excluded.current_period_end_ms,
                will_renew = excluded.will_renew, pending_plan_id = excluded.pending_plan_id, updated_at_ms = excluded.updated_at_ms,
                next_drip_at_ms = 0, family_shared = excluded.family_shared
            """, [userID, planID, status.rawValue, provider.rawValue, start, end, willRenew, pending, clock.now(), familyShared])
    }

    /// Rollover then the plan's monthly tokens, once per period month (the key every path uses: comps, drips, events).
    /// A subscription received through Family Sharing gets the tokens only when the plan says so (``SubscriptionPlan/familySharedTokens``):
    /// the purchaser's own subscription grants them once, not once per family member.
    @discardableResult
    func startPeriod(
        _ tx: any SQLExecutor, userID: String, plan: SubscriptionPlan, start: Date, month: Int = 0, topUp: Bool = false
    ) async throws -> Bool {
        let shared = try await tx.first("SELECT family_shared FROM subscriptions WHERE user_id = ?", [userID]).map { try $0.bool("family_shared") }
        let tokens = shared == true && plan.familySharedTokens != true ? 0 : Int64(plan.monthlyTokens)
        return try await ledger.startPeriod(
            tx, userID: userID, periodKey: Self.periodKey(start, month: month), planID: plan.id, monthlyTokens: tokens,
            maxRolloverTokens: Int64(plan.maxRollover), topUp: topUp)
    }

    /// The ledger's key for month `month` of the period that started at `start` (0: the period's start). The ledger runs
    /// each key once, so a period's tokens are granted once whichever path (event, comp, drip) gets there first.
    public static func periodKey(_ start: Date, month: Int = 0) -> String {
        month == 0 ? "period:\(start.epochMilliseconds)" : "period:\(start.epochMilliseconds):month:\(month)"
    }

    public static func defaultEnd(start: Date, plan: SubscriptionPlan, trial: Bool) -> Date {
        let calendar = Calendar(identifier: .gregorian)
        // Calendar arithmetic answers nil only far outside any provider's dates (ProviderDates); then the start stands.
        if trial && plan.trialDays > 0 { return calendar.date(byAdding: .day, value: plan.trialDays, to: start) ?? start }
        return calendar.date(byAdding: plan.interval.calendarComponent, value: 1, to: start) ?? start
    }
}
