import Clock
import Crypto
import Entitlements
import Foundation
import Ledger
import Logging
import Storage

/// Billing failures the caller can act on; verification failures are the sender's (400), configuration gaps 503.
public enum BillingError: Error, Equatable, Sendable {
    case notConfigured(String)
    case apple(AppleVerificationError)
    case stripe(StripeSignatureError)
    case malformed(String)
    case accountTokenMismatch
    case boundToAnotherAccount
    case unknownProduct(String)
    case transactionRevoked
    /// A StoreKit offer the account may not have (the reason).
    case offerNotEligible(String)
}

/// What a received event did (stored as `billing_events.verdict`).
public enum BillingOutcome: String, Sendable, Equatable, Codable {
    /// Stored, being applied (only inside the transaction that applies it).
    case processing
    case applied
    /// The provider sent it before: no effect.
    case duplicate
    /// Older than the newest applied event: recorded, not applied (a paid period still grants its tokens once).
    case stale
    /// Makes no sense in the current state: recorded, not applied.
    case ignored
    /// Informational (TEST and other types): stored and acknowledged.
    case acknowledged
    /// No account is bound to its purchase yet: applied when the purchase is verified or its checkout arrives.
    case unmatched
    /// The purchase belongs to another account: recorded, never moved silently.
    case conflict
    /// Verified but refused (an unknown product, another account's token): stored with the reason.
    case rejected
}

/// What happened to one received event.
public struct BillingVerdict: Sendable, Equatable {
    public let outcome: BillingOutcome
    public let detail: String?
    public let userID: String?

    static func acknowledged(_ detail: String, user: String? = nil) -> BillingVerdict {
        BillingVerdict(outcome: .acknowledged, detail: detail, userID: user)
    }
}

/// One stored billing event, for operators.
public struct BillingEvent: Sendable {
    public let id: String
    public let provider: String
    public let source: String
    public let externalID: String?
    public let eventType: String?
    public let userID: String?
    public let originalID: String?
    public let environment: String?
    public let outcome: BillingOutcome
    public let detail: String?
    public let signedAt: Date?
    public let receivedAt: Date
    public let appliedAt: Date?
    public let raw: String
    public let rawSHA256: String
}

/// A position in the event list (newest first): `<received ms>.<id>`.
public struct BillingCursor: Sendable, CustomStringConvertible {
    public let receivedAt: Date
    public let id: String
    public init(receivedAt: Date, id: String) {
        self.receivedAt = receivedAt
        self.id = id
    }
    public init?(_ text: String) {
        let parts = text.split(separator: ".", maxSplits: 1)
        guard parts.count == 2, let ms = Int64(parts[0]), parts[1].utf8.count <= 64 else { return nil }
        self.init(receivedAt: Date(epochMilliseconds: ms), id: String(parts[1]))
    }
    public var description: String { "\(receivedAt.epochMilliseconds).\(id)" }
}

/// Turns verified Apple and Stripe events into subscription changes and token grants, each exactly once: every
/// event is stored with its verdict (deduplicated by the provider's event id), every purchase is bound to one
/// account, and every grant or clawback is keyed by the provider's transaction / session / invoice id.
public struct BillingService: Sendable {
    let database: any Database
    public let machine: SubscriptionMachine
    public let apple: AppleSignedDataVerifier?
    public let stripe: StripeSignatureVerifier?
    /// Which user ids are live accounts (owned by Auth).
    let accounts: any AccountDirectory
    let clock: any TimeSource

    /// How CONSUMPTION_REQUESTs are answered (`APPLE_SAMPLE_CONTENT_PROVIDED`, `APPLE_REFUND_PREFERENCE`).
    public var consumptionPolicy = AppleConsumptionPolicy()

    /// Raw bodies of rejected (unverified) events are kept only up to this size: enough for audit, not a free store.
    public static let rejectedRawBytesMax = 16 * 1024

    public init(
        database: any Database, machine: SubscriptionMachine, apple: AppleSignedDataVerifier?, stripe: StripeSignatureVerifier?,
        accounts: any AccountDirectory, clock: any TimeSource
    ) {
        self.database = database
        self.machine = machine
        self.apple = apple
        self.stripe = stripe
        self.accounts = accounts
        self.clock = clock
    }

    var catalog: PlanCatalog { machine.store.catalog }
    var ledger: Ledger { machine.ledger }

    // MARK: - Event log

    /// Stores an event. With a `dedupeKey` already taken, the event is stored as a duplicate and nil is returned.
    func claim(
        _ tx: any SQLExecutor, provider: String, source: String, dedupeKey: String?, externalID: String?, eventType: String?, originalID: String?,
        environment: String?, signedAt: Date?, raw: String, recordDuplicate: Bool = true
    ) async throws -> String? {
        let id = FreshID.uuid()
        let digest = hexString(SHA256.hash(data: Data(raw.utf8)))
        let rows = try await tx.query(
            """
            INSERT INTO billing_events (id, provider, source, dedupe_key, external_id, event_type, original_id, environment, verdict, signed_at_ms, raw, raw_sha256, received_at_ms)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'processing', ?, ?, ?, ?) ON CONFLICT (dedupe_key) DO NOTHING RETURNING id
            """, [id, provider, source, dedupeKey, externalID, eventType, originalID, environment, signedAt, Self.storable(raw), digest, clock.now()])
        if !rows.isEmpty { return id }
        guard recordDuplicate else { return nil }
        try await tx.query(
            """
            INSERT INTO billing_events (id, provider, source, external_id, event_type, original_id, environment, verdict, detail, signed_at_ms, raw, raw_sha256, received_at_ms)
            VALUES (?, ?, ?, ?, ?, ?, ?, 'duplicate', 'already received; no effect', ?, ?, ?, ?)
            """, [id, provider, source, externalID, eventType, originalID, environment, signedAt, Self.storable(raw), digest, clock.now()])
        return nil
    }

    /// Text both engines store: NUL (which PostgreSQL TEXT refuses) becomes U+FFFD; `raw_sha256` keeps the original's hash.
    static func storable(_ raw: String) -> String {
        raw.contains("\u{0}") ? raw.replacingOccurrences(of: "\u{0}", with: "\u{FFFD}") : raw
    }

    func settle(_ tx: any SQLExecutor, eventID: String, _ verdict: BillingVerdict) async throws {
        try await tx.query(
            "UPDATE billing_events SET verdict = ?, detail = ?, user_id = COALESCE(?, user_id), applied_at_ms = ? WHERE id = ?",
            [verdict.outcome.rawValue, verdict.detail, verdict.userID, clock.now(), eventID])
    }

    /// Records an event that failed verification (its own transaction: the request itself fails).
    public func recordRejected(_ database: any Database, provider: String, source: String, raw: String, detail: String, logger: Logger) async throws {
        let kept = Self.storable(
            raw.utf8.count > Self.rejectedRawBytesMax ? String(decoding: Array(raw.utf8.prefix(Self.rejectedRawBytesMax)), as: UTF8.self) : raw)
        let digest = hexString(SHA256.hash(data: Data(raw.utf8)))
        try await database.transaction(logger: logger) { tx in
            try await tx.query(
                """
                INSERT INTO billing_events (id, provider, source, verdict, detail, raw, raw_sha256, received_at_ms) VALUES (?, ?, ?, 'rejected', ?, ?, ?, ?)
                """, [FreshID.uuid(), provider, source, detail, kept, digest, clock.now()])
        }
    }

    public func events(_ tx: any SQLExecutor, userID: String?, provider: String?, limit: Int, before: BillingCursor?) async throws -> [BillingEvent] {
        var sql = "SELECT * FROM billing_events WHERE 1 = 1"
        var binds: [any SQLBindable] = []
        if let userID { sql += " AND user_id = ?"; binds.append(userID) }
        if let provider { sql += " AND provider = ?"; binds.append(provider) }
        if let before {
            sql += " AND (received_at_ms < ? OR (received_at_ms = ? AND id < ?))"
            binds += [before.receivedAt, before.receivedAt, before.id]
        }
        sql += " ORDER BY received_at_ms DESC, id DESC LIMIT ?"
        binds.append(limit)
        return try await tx.query(sql, binds).map { row in
            BillingEvent(
                id: try row.string("id"), provider: try row.string("provider"), source: try row.string("source"),
                externalID: row.optionalString("external_id"),
                eventType: row.optionalString("event_type"), userID: row.optionalString("user_id"), originalID: row.optionalString("original_id"),
                environment: row.optionalString("environment"), outcome: BillingOutcome(rawValue: try row.string("verdict")) ?? .rejected,
                detail: row.optionalString("detail"),
                signedAt: row.optionalDate("signed_at_ms"), receivedAt: try row.date("received_at_ms"), appliedAt: row.optionalDate("applied_at_ms"),
                raw: try row.string("raw"), rawSHA256: try row.string("raw_sha256"))
        }
    }

    // MARK: - Accounts and grants shared by both providers

    /// In an account's erasure transaction: its provider purchases are bound to no account any more, so a renewal or a
    /// refund for them changes nothing, and whoever holds the purchase may bind it to another account.
    public static func accountErased(_ tx: any SQLExecutor, userID: String) async throws {
        try await tx.query("DELETE FROM billing_accounts WHERE user_id = ?", [userID])
    }

    /// Binds a provider purchase to an account. Already bound to another account → `boundToAnotherAccount`.
    /// Returns true when the binding is new.
    func bind(_ tx: any SQLExecutor, provider: String, externalID: String, userID: String, environment: String?) async throws -> Bool {
        try await lockBinding(tx, provider: provider, externalID: externalID)
        let inserted = try await tx.query(
            """
            INSERT INTO billing_accounts (provider, external_id, user_id, environment, created_at_ms) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT (provider, external_id) DO NOTHING RETURNING user_id
            """, [provider, externalID, userID, environment, clock.now()])
        if !inserted.isEmpty { return true }
        // The binding as stored: an erased account's bindings are deleted with it, so another account's liveness never
        // matters here, and asking (a share lock on that account's row, while the caller's own is held) let two accounts
        // verifying each other's purchases deadlock.
        guard try await storedBinding(tx, provider: provider, externalID: externalID) == userID else { throw BillingError.boundToAnotherAccount }
        return false
    }

    /// The live account a provider purchase is bound to (share-locked, as every write that credits asks: an event racing
    /// the account's erasure either commits first or finds no account, and changes nothing).
    /// Not bound yet: asked again under the id's binding lock (``lockBinding(_:provider:externalID:)``), so an event that
    /// finds no account is stored as unmatched either before a binding's transaction (whose replay then applies it) or
    /// after it (and finds the account).
    func boundUser(_ tx: any SQLExecutor, provider: String, externalID: String) async throws -> String? {
        var user = try await storedBinding(tx, provider: provider, externalID: externalID)
        if user == nil, tx.engine == .postgres {
            try await lockBinding(tx, provider: provider, externalID: externalID)
            user = try await storedBinding(tx, provider: provider, externalID: externalID)
        }
        guard let user else { return nil }
        return try await accounts.isActiveUser(user, tx) ? user : nil
    }

    /// The account id a provider purchase is bound to, as stored (live or not).
    func storedBinding(_ tx: any SQLExecutor, provider: String, externalID: String) async throws -> String? {
        try await tx.first("SELECT user_id FROM billing_accounts WHERE provider = ? AND external_id = ?", [provider, externalID])?
            .optionalString("user_id")
    }

    /// On PostgreSQL, a new binding of a provider id and a lookup that found none take turns (a transaction-scoped
    /// advisory lock on the id; SQLite runs one write transaction at a time anyway). Without it, an event read no binding
    /// while a checkout bound the purchase and looked for unmatched events; each missed the other's uncommitted row, and
    /// the event stayed unmatched for good (the provider does not send it again after a 200). Transactions that take two
    /// (a Stripe subscription and its customer) take them in the order ``stripeOwner(_:_:)`` looks them up.
    func lockBinding(_ tx: any SQLExecutor, provider: String, externalID: String) async throws {
        guard tx.engine == .postgres else { return }
        try await tx.query("SELECT pg_advisory_xact_lock(hashtext(?)) AS locked", ["billing_accounts:\(provider):\(externalID)"])
    }

    func existingUser(_ tx: any SQLExecutor, _ id: String?) async throws -> String? {
        guard let id = id?.lowercased(), !id.isEmpty, id.utf8.count <= 64 else { return nil }
        return try await accounts.isActiveUser(id, tx) ? id : nil
    }

    /// Grants a token pack once per provider purchase (purchased tokens never expire).
    func grantPack(
        _ tx: any SQLExecutor, provider: String, sourceID: String, userID: String, pack: TokenPack, quantity: Int, paymentRef: String?
    ) async throws -> BillingVerdict {
        let tokens = Int64(pack.tokens) * Int64(max(1, min(quantity, 100)))
        let now = clock.now()
        let inserted = try await tx.query(
            """
            INSERT INTO billing_grants (provider, source_id, user_id, kind, product_id, payment_ref, tokens, created_at_ms, updated_at_ms)
            VALUES (?, ?, ?, 'tokens', ?, ?, ?, ?, ?) ON CONFLICT (provider, source_id) DO NOTHING RETURNING source_id
            """, [provider, sourceID, userID, pack.id, paymentRef, tokens, now, now])
        guard !inserted.isEmpty else {
            return BillingVerdict(outcome: .duplicate, detail: "\(pack.id) already granted for \(sourceID)", userID: userID)
        }
        _ = try await ledger.grant(tx, userID: userID, amountTokens: tokens, bucket: .purchased, reason: "purchase.\(provider).\(pack.id)")
        return BillingVerdict(outcome: .applied, detail: "granted \(tokens) purchased tokens (\(pack.id))", userID: userID)
    }

    /// Records what a subscription period granted, so a refund of that payment can find it.
    func recordPeriod(
        _ tx: any SQLExecutor, provider: String, sourceID: String, userID: String, planID: String, paymentRef: String?, start: Date
    )
        async throws
    {
        let key = SubscriptionMachine.periodKey(start)
        guard let granted = try await ledger.periodGrant(tx, userID: userID, periodKey: key) else { return }
        let now = clock.now()
        try await tx.query(
            """
            INSERT INTO billing_grants (provider, source_id, user_id, kind, product_id, payment_ref, tokens, period_key, created_at_ms, updated_at_ms)
            VALUES (?, ?, ?, 'period', ?, ?, ?, ?, ?, ?) ON CONFLICT (provider, source_id) DO NOTHING
            """, [provider, sourceID, userID, planID, paymentRef, granted, key, now, now])
    }

    /// Claws back a share (thousandths of a percent, 100000 = all) of what a token purchase granted, cumulatively:
    /// a second partial refund takes only the difference; never below zero, the shortfall is recorded.
    /// `disputed`: a dispute's withdrawal, whose take is also recorded as `disputed_tokens` (``restoreDisputed``).
    func clawPack(_ tx: any SQLExecutor, provider: String, sourceID: String, share: Int64, disputed: Bool = false) async throws -> BillingVerdict? {
        guard
            let grant = try await tx.first(
                "SELECT * FROM billing_grants WHERE provider = ? AND source_id = ? AND kind = 'tokens'" + tx.dialect.forUpdate, [provider, sourceID])
        else { return nil }
        let userID = try grant.string("user_id")
        // An erased account's tokens were forfeited with it: nothing to take back, and nothing may be posted to it.
        guard try await accounts.isActiveUser(userID, tx) else {
            return BillingVerdict(outcome: .ignored, detail: "the account this purchase was granted to is erased", userID: nil)
        }
        let tokens = try grant.int("tokens")
        let done = try grant.int("clawed_tokens") + grant.int("shortfall_tokens")
        let target = Share.apply(share, to: tokens)
        guard target > done else { return BillingVerdict(outcome: .duplicate, detail: "already clawed back \(done) of \(tokens)", userID: userID) }
        let (clawed, shortfall) = try await ledger.clawback(
            tx, userID: userID, amountTokens: target - done, bucket: .purchased, reason: "refund_clawback")
        try await tx.query(
            """
            UPDATE billing_grants SET clawed_tokens = clawed_tokens + ?, shortfall_tokens = shortfall_tokens + ?, disputed_tokens = disputed_tokens + ?,
            disputed_shortfall = disputed_shortfall + ?, updated_at_ms = ? WHERE provider = ? AND source_id = ?
            """, [clawed, shortfall, disputed ? clawed : 0, disputed ? shortfall : 0, clock.now(), provider, sourceID])
        return BillingVerdict(outcome: .applied, detail: "clawed \(clawed) shortfall \(shortfall) of \(tokens)", userID: userID)
    }

    /// A refund of a pack purchase this service never granted (Apple's REFUND came first; the device's verify, carrying
    /// the transaction as signed before the refund, may still come): the grant is recorded with the refund already
    /// taken, so that verify is a duplicate, what a partial refund left is granted now, and a reversed refund gives back
    /// what was refunded (a reviewer kept a signed transaction, had it refunded, then verified it for the tokens).
    func recordRefundBeforeGrant(
        _ tx: any SQLExecutor, provider: String, sourceID: String, userID: String, pack: TokenPack, quantity: Int, share: Int64
    ) async throws -> BillingVerdict {
        let tokens = Int64(pack.tokens) * Int64(max(1, min(quantity, 100)))
        let refunded = Share.apply(share, to: tokens)
        let now = clock.now()
        let inserted = try await tx.query(
            """
            INSERT INTO billing_grants (provider, source_id, user_id, kind, product_id, tokens, clawed_tokens, created_at_ms, updated_at_ms)
            VALUES (?, ?, ?, 'tokens', ?, ?, ?, ?, ?) ON CONFLICT (provider, source_id) DO NOTHING RETURNING source_id
            """, [provider, sourceID, userID, pack.id, tokens, refunded, now, now])
        guard !inserted.isEmpty else {
            // Granted meanwhile (its row committed after this refund looked): claw it back as any refund does.
            return try await clawPack(tx, provider: provider, sourceID: sourceID, share: share)
                ?? BillingVerdict(outcome: .duplicate, detail: "\(sourceID) already recorded", userID: userID)
        }
        if tokens > refunded {
            _ = try await ledger.grant(
                tx, userID: userID, amountTokens: tokens - refunded, bucket: .purchased, reason: "purchase.\(provider).\(pack.id)")
        }
        return BillingVerdict(outcome: .applied, detail: "refunded before it was granted: \(refunded) of \(tokens) never granted", userID: userID)
    }

    /// A reversed refund gives back what the refund took.
    func restorePack(_ tx: any SQLExecutor, provider: String, sourceID: String) async throws -> BillingVerdict? {
        guard
            let grant = try await tx.first(
                "SELECT * FROM billing_grants WHERE provider = ? AND source_id = ? AND kind = 'tokens'" + tx.dialect.forUpdate, [provider, sourceID])
        else { return nil }
        let userID = try grant.string("user_id")
        guard try await accounts.isActiveUser(userID, tx) else {
            return BillingVerdict(outcome: .ignored, detail: "the account this purchase was granted to is erased", userID: nil)
        }
        let clawed = try grant.int("clawed_tokens")
        if clawed > 0 { _ = try await ledger.grant(tx, userID: userID, amountTokens: clawed, bucket: .purchased, reason: "refund_reversed") }
        try await tx.query(
            "UPDATE billing_grants SET clawed_tokens = 0, shortfall_tokens = 0, updated_at_ms = ? WHERE provider = ? AND source_id = ?",
            [clock.now(), provider, sourceID])
        return BillingVerdict(outcome: .applied, detail: "restored \(clawed)", userID: userID)
    }

    /// A won dispute of a Stripe pack purchase: what the dispute's withdrawal took (`disputed_tokens`) returns, once; what
    /// a refund took stays taken.
    func restoreDisputed(_ tx: any SQLExecutor, sourceID: String, userID: String) async throws -> BillingVerdict {
        guard try await accounts.isActiveUser(userID, tx) else {
            return BillingVerdict(outcome: .ignored, detail: "the account this purchase was granted to is erased", userID: nil)
        }
        let row = try await tx.first(
            "SELECT disputed_tokens, disputed_shortfall FROM billing_grants WHERE provider = 'stripe' AND source_id = ?" + tx.dialect.forUpdate,
            [sourceID])
        let disputed = try row?.int("disputed_tokens") ?? 0
        let shortfall = try row?.int("disputed_shortfall") ?? 0
        guard disputed > 0 || shortfall > 0 else { return BillingVerdict(outcome: .ignored, detail: "the dispute took nothing back", userID: userID) }
        if disputed > 0 { _ = try await ledger.grant(tx, userID: userID, amountTokens: disputed, bucket: .purchased, reason: "refund_reversed") }
        // What the dispute could not take (spent) is no longer counted as taken: a later refund of the pack takes it.
        try await tx.query(
            """
            UPDATE billing_grants SET clawed_tokens = clawed_tokens - ?, shortfall_tokens = shortfall_tokens - ?, disputed_tokens = 0,
            disputed_shortfall = 0, updated_at_ms = ? WHERE provider = 'stripe' AND source_id = ?
            """, [disputed, shortfall, clock.now(), sourceID])
        return BillingVerdict(outcome: .applied, detail: "restored \(disputed) a dispute took", userID: userID)
    }

    /// Applies one subscription event through the state machine and maps its outcome to a verdict.
    func applyMachine(
        _ tx: any SQLExecutor, provider: SubscriptionProvider, eventID: String, userID: String, at: Date, _ event: SubscriptionEvent,
        providerSubscriptionID: String? = nil, providerCustomerID: String? = nil, familyShared: Bool = false
    ) async throws -> BillingVerdict {
        // An erased account's subscription ended with it: no event changes it, and nothing may be posted to its ledger.
        guard try await accounts.isActiveUser(userID, tx) else {
            return BillingVerdict(outcome: .ignored, detail: "the account this subscription belonged to is erased", userID: nil)
        }
        let result = try await machine.apply(
            tx, provider: provider, eventID: eventID, userID: userID, occurredAt: at, event: event,
            binding: ProviderBinding(subscriptionID: providerSubscriptionID, customerID: providerCustomerID), familyShared: familyShared)
        return BillingVerdict(outcome: BillingOutcome(result.outcome), detail: result.detail, userID: userID)
    }

    /// The event for a paid subscription period: a renewal of the same provider subscription, else a new start.
    func periodEvent(
        _ tx: any SQLExecutor, userID: String, plan: SubscriptionPlan, provider: SubscriptionProvider, providerSubscriptionID: String,
        start: Date, end: Date?, trial: Bool
    ) async throws -> SubscriptionEvent {
        if let current = try await machine.lockedSubscription(userID: userID, tx), current.provider == provider,
            current.providerSubscriptionID == providerSubscriptionID, current.status != .expired
        {
            if plan.id == current.planID || plan.id == current.pendingPlanID {
                return .renew(
                    periodStart: start, periodEnd: end ?? SubscriptionMachine.defaultEnd(start: start, plan: plan, trial: false), planID: plan.id)
            }
            return .changePlanNow(planID: plan.id, periodEnd: end, periodStart: start)
        }
        return .start(planID: plan.id, periodStart: start, periodEnd: end, trial: trial, willRenew: true)
    }
}

extension BillingOutcome {
    /// A subscription event's outcome as a billing outcome (the same names).
    init(_ outcome: EventOutcome) {
        switch outcome {
        case .applied: self = .applied
        case .duplicate: self = .duplicate
        case .stale: self = .stale
        case .ignored: self = .ignored
        }
    }
}
