import Clock
import Events
import Foundation
import Ledger
import Storage

/// A premium sticker pack (seed 000), as operators manage it.
public struct StickerPack: Codable, Sendable, Equatable {
    public var id: String
    public var name: String
    public var description: String
    public var iconUrl: String?
    public var category: String
    public var isPremium: Bool
    public var tokenPrice: Int64
    public var includedInPlans: [String]
    public var isActive: Bool
    public var sortOrder: Int64
    public var stickerCount: Int64
    public var previewStickers: [String]
    /// Who may see it (``ContentRating``); `all` unless the operator says otherwise.
    public var contentRating: ContentRating

    public static let categories: Set<String> = ["emoji", "custom", "seasonal", "branded"]

    enum CodingKeys: String, CodingKey {
        case id, name, description, iconUrl, category, isPremium, tokenPrice, includedInPlans, isActive, sortOrder, stickerCount, previewStickers
        case contentRating
    }

    /// Operators give `id`, `name` and `category`; the rest has defaults: `description` "", no `iconUrl`, `tokenPrice` 0,
    /// `includedInPlans` [], `isPremium` true when a `tokenPrice` or `includedInPlans` is given, `isActive` true,
    /// `sortOrder` 0, `stickerCount` 0, `previewStickers` [], `contentRating` `all`.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(String.self, forKey: .id)
        name = try c.decode(String.self, forKey: .name)
        category = try c.decode(String.self, forKey: .category)
        description = try c.decodeIfPresent(String.self, forKey: .description) ?? ""
        iconUrl = try c.decodeIfPresent(String.self, forKey: .iconUrl)
        tokenPrice = try c.decodeIfPresent(Int64.self, forKey: .tokenPrice) ?? 0
        includedInPlans = try c.decodeIfPresent([String].self, forKey: .includedInPlans) ?? []
        isPremium = try c.decodeIfPresent(Bool.self, forKey: .isPremium) ?? (tokenPrice > 0 || !includedInPlans.isEmpty)
        isActive = try c.decodeIfPresent(Bool.self, forKey: .isActive) ?? true
        sortOrder = try c.decodeIfPresent(Int64.self, forKey: .sortOrder) ?? 0
        stickerCount = try c.decodeIfPresent(Int64.self, forKey: .stickerCount) ?? 0
        previewStickers = try c.decodeIfPresent([String].self, forKey: .previewStickers) ?? []
        contentRating = try c.decodeIfPresent(ContentRating.self, forKey: .contentRating) ?? .all
    }

    /// What locking needs of an active premium pack.
    struct Premium: Sendable { let id: String; let includedInPlans: [String]; let contentRating: ContentRating }

    init(row: SQLRow) throws {
        id = try row.string("id")
        name = try row.string("name")
        description = try row.string("description")
        iconUrl = row.optionalString("icon_url")
        category = try row.string("category")
        isPremium = try row.bool("is_premium")
        tokenPrice = try row.int("token_price")
        includedInPlans = (try? JSONDecoder().decode([String].self, from: Data(try row.string("included_in_plans").utf8))) ?? []
        isActive = try row.bool("is_active")
        sortOrder = try row.int("sort_order")
        stickerCount = try row.int("sticker_count")
        previewStickers = (try? JSONDecoder().decode([String].self, from: Data(try row.string("preview_stickers").utf8))) ?? []
        // Only validated ratings are stored; an unknown one would be the strictest, never the most open.
        contentRating = ContentRating(text: row.optionalString("content_rating")) ?? .age18
    }

    /// Every problem with the pack's fields, given the plan catalog.
    public func problems(catalog: PlanCatalog) -> [String] {
        var problems: [String] = []
        if id.isEmpty || id.count > 64 || !id.allSatisfy({ $0.isASCII && ($0.isLowercase || $0.isNumber || $0 == "-") }) {
            problems.append("id must be a slug of 1 to 64 lower-case letters, digits or '-'")
        }
        if name.trimmingCharacters(in: .whitespaces).isEmpty || name.count > 100 { problems.append("name must be 1 to 100 characters") }
        if description.count > 1000 { problems.append("description must be at most 1000 characters") }
        if !Self.categories.contains(category) { problems.append("category must be one of \(Self.categories.sorted().joined(separator: ", "))") }
        if tokenPrice < 0 || tokenPrice > LedgerLimits.amountTokensMax {
            problems.append("tokenPrice must be from 0 to \(LedgerLimits.amountTokensMax)")
        }
        if isPremium && tokenPrice == 0 && includedInPlans.isEmpty { problems.append("a premium pack needs a tokenPrice or includedInPlans") }
        if !isPremium && (tokenPrice > 0 || !includedInPlans.isEmpty) {
            problems.append("a pack with a tokenPrice or includedInPlans is premium (set isPremium true or leave it out)")
        }
        if stickerCount < 0 { problems.append("stickerCount must not be negative") }
        for plan in includedInPlans where catalog.plan(id: plan) == nil {
            problems.append("includedInPlans names an unknown plan '\(plan.prefix(80))'")
        }
        if let iconUrl, !Self.isHTTPS(iconUrl) && !Self.isOwnMedia(iconUrl) { problems.append("iconUrl '\(iconUrl.prefix(80))' is not an https URL") }
        for (index, url) in previewStickers.enumerated() where !Self.isHTTPS(url) {
            problems.append("previewStickers[\(index)] '\(url.prefix(80))' is not an https URL")
        }
        if previewStickers.count > 50 { problems.append("at most 50 previewStickers") }
        return problems
    }

    static func isHTTPS(_ text: String) -> Bool {
        guard text.utf8.count <= 1024, let url = URL(string: text), url.scheme == "https", let host = url.host else { return false }
        return !host.isEmpty
    }

    /// A URL of this service's own media (`/media/<key>`, as an icon upload sets it).
    static func isOwnMedia(_ text: String) -> Bool {
        text.hasPrefix("/media/") && text.utf8.count <= 100 && !text.contains("?")
    }

    /// The stored file an icon URL shows: the key of the service's own `/media/<key>`, nil for an https URL elsewhere.
    static func ownFileKey(_ url: String?) -> String? {
        guard let url, let path = url.split(separator: "?").first, path.hasPrefix("/media/") else { return nil }
        return path.split(separator: "/").last.map(String.init)
    }
}

/// Why a check or an unlock is refused.
public enum EntitlementError: Error, Equatable, Sendable {
    case packNotFound
    /// A pack with this id exists (create refuses to replace it).
    case packExists(String)
    case alreadyUnlocked(String)
    case purchaseNotAllowed
    case invalid([String])
    /// A premium pack this user has not unlocked; `previews` are the thumbnails anyone may see.
    case packLocked(previewKeys: [String])
    case stickerExists(String)
    case stickerNotFound
    case uploadQuotaExceeded(maxStickers: Int, maxBytes: Int)
    /// The acting profile may not add (or, `change`, remove) the account's own stickers.
    case ownStickersNotAllowed(change: Bool)
    /// The plan or the profile does not allow this (a reservation's refusal; the reason is the problem's code).
    case refused(Refusal, detail: String)
    /// The account has no profile with this id.
    case profileNotFound
    /// The profile the session acts as was deleted while the request was under way: choose one again.
    case profileSelectionRequired
    /// The account has no purchase request with this id.
    case purchaseRequestNotFound
    /// The purchase request is already resolved this other way (`approved`, `declined` or `expired`).
    case purchaseRequestResolved(String)
}

/// The pack catalog and who unlocked what.
public struct StickerPackStore: Sendable {
    let catalog: PlanCatalog
    let clock: any TimeSource
    /// Where `pack.unlocked` is recorded (in the unlock's transaction).
    let events: any EventSink

    public init(catalog: PlanCatalog, clock: any TimeSource, events: any EventSink = NoEvents()) {
        self.catalog = catalog
        self.clock = clock
        self.events = events
    }

    public func all(_ tx: any SQLExecutor, activeOnly: Bool) async throws -> [StickerPack] {
        try await tx.query(
            "SELECT * FROM sticker_packs" + (activeOnly ? " WHERE is_active" : "") + " ORDER BY sort_order, id LIMIT 1000"
        ).map(StickerPack.init)
    }

    public func pack(_ tx: any SQLExecutor, id: String) async throws -> StickerPack? {
        try await tx.first("SELECT * FROM sticker_packs WHERE id = ?", [id]).map(StickerPack.init)
    }

    /// Creates or replaces a pack (operators). Returns false when `create` and the id exists.
    public func save(_ tx: any SQLExecutor, _ pack: StickerPack, create: Bool) async throws -> Bool {
        let problems = pack.problems(catalog: catalog)
        guard problems.isEmpty else { throw EntitlementError.invalid(problems) }
        let now = clock.now()
        let plans = String(decoding: try JSONEncoder().encode(pack.includedInPlans), as: UTF8.self)
        let previews = String(decoding: try JSONEncoder().encode(pack.previewStickers), as: UTF8.self)
        let values: [any SQLBindable] = [
            pack.name, pack.description, pack.iconUrl, pack.category, pack.isPremium, pack.tokenPrice, plans, pack.isActive, pack.sortOrder,
            pack.stickerCount, previews, pack.contentRating.rawValue, now,
        ]
        if create {
            let inserted = try await tx.query(
                """
                INSERT INTO sticker_packs (name, description, icon_url, category, is_premium, token_price, included_in_plans, is_active, sort_order,
                                           sticker_count, preview_stickers, content_rating, updated_at_ms, id, created_at_ms)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING RETURNING id
                """, values + [pack.id, now])
            return !inserted.isEmpty
        }
        // The file of an icon this replaces (an upload's, before the pack was saved with another iconUrl) is no longer shown.
        let replaced = try await tx.first("SELECT icon_url FROM sticker_packs WHERE id = ?" + tx.dialect.forUpdate, [pack.id])?.optionalString(
            "icon_url")
        if let old = StickerPack.ownFileKey(replaced), old != StickerPack.ownFileKey(pack.iconUrl) {
            try await StickerStore().queueFileRemovals(tx, [old], now: now)
        }
        let updated = try await tx.query(
            """
            UPDATE sticker_packs SET name = ?, description = ?, icon_url = ?, category = ?, is_premium = ?, token_price = ?, included_in_plans = ?,
                is_active = ?, sort_order = ?, sticker_count = ?, preview_stickers = ?, content_rating = ?, updated_at_ms = ? WHERE id = ? RETURNING id
            """, values + [pack.id])
        if updated.isEmpty { throw EntitlementError.packNotFound }
        try await touch(tx, pack.id)
        return true
    }

    /// Marks a pack changed: `updated_at_ms` strictly later than before, even within one millisecond, because catalog
    /// versions compare the latest change (its stickers, name, icon).
    public func touch(_ tx: any SQLExecutor, _ id: String) async throws {
        let now = clock.now()
        try await tx.query(
            "UPDATE sticker_packs SET updated_at_ms = CASE WHEN updated_at_ms >= ? THEN updated_at_ms + 1 ELSE ? END WHERE id = ?", [now, now, id])
    }

    /// Points a pack's icon at a stored file (its URL is the service's own, so it skips the https rule of operator input).
    /// The icon it replaces, and `unusedKeys` (files stored for it that it does not show), are queued for removal.
    public func setIcon(_ tx: any SQLExecutor, id: String, url: String, unusedKeys: [String] = []) async throws -> StickerPack? {
        let replaced = try await tx.first("SELECT icon_url FROM sticker_packs WHERE id = ?" + tx.dialect.forUpdate, [id])?.optionalString("icon_url")
        let replacedKey = StickerPack.ownFileKey(replaced).flatMap { $0 == StickerPack.ownFileKey(url) ? nil : $0 }
        try await StickerStore().queueFileRemovals(tx, unusedKeys + (replacedKey.map { [$0] } ?? []), now: clock.now())
        guard
            !(try await tx.query("UPDATE sticker_packs SET icon_url = ?, updated_at_ms = ? WHERE id = ? RETURNING id", [url, clock.now(), id]).isEmpty)
        else { return nil }
        try await touch(tx, id)
        return try await pack(tx, id: id)
    }

    /// Deactivates a pack (unlocks are kept). Returns false when there is no such pack.
    public func deactivate(_ tx: any SQLExecutor, id: String) async throws -> Bool {
        !(try await tx.query("UPDATE sticker_packs SET is_active = ?, updated_at_ms = ? WHERE id = ? RETURNING id", [false, clock.now(), id]).isEmpty)
    }

    /// The packs this user bought.
    public func unlockedIDs(_ tx: any SQLExecutor, userID: String) async throws -> Set<String> {
        Set(try await tx.query("SELECT pack_id FROM pack_unlocks WHERE user_id = ?", [userID]).map { try $0.string("pack_id") })
    }

    /// Whether `pack` is locked for a user on `plan` who bought `bought`: free packs never are; premium packs are
    /// open when bought or included in the current plan.
    public func isLocked(_ pack: StickerPack, plan: SubscriptionPlan, bought: Set<String>) -> Bool {
        isLocked(id: pack.id, isPremium: pack.isPremium, includedInPlans: pack.includedInPlans, plan: plan, bought: bought)
    }

    func isLocked(id: String, isPremium: Bool, includedInPlans: [String], plan: SubscriptionPlan, bought: Set<String>) -> Bool {
        guard isPremium else { return false }
        return !bought.contains(id) && !includedInPlans.contains(plan.id) && !(plan.includedStickerPacks ?? []).contains(id)
    }

    /// `contentRestricted` when the pack is rated above the profile's maximum (nil: no profile, nothing to respect).
    public static func requireRating(_ pack: StickerPack, under maxRating: ContentRating?) throws {
        guard !ContentRating.allows(pack.contentRating, under: maxRating) else { return }
        throw EntitlementError.refused(
            .contentRestricted, detail: "The pack '\(pack.id)' is rated \(pack.contentRating.rawValue), above this profile's maximum content rating.")
    }

    /// Whether a profile may see the pack.
    public static func isVisible(_ pack: StickerPack, to maxRating: ContentRating?) -> Bool {
        ContentRating.allows(pack.contentRating, under: maxRating)
    }

    /// Buys a pack: records the unlock and spends its price in the same transaction. The unlock row is written
    /// first, so a concurrent second tap waits on it and then finds the pack unlocked (charged once).
    public func unlock(
        _ tx: any SQLExecutor, ledger: Ledger, userID: String, packID: String, plan: SubscriptionPlan, canMakePurchases: Bool,
        attribution: Attribution? = nil
    ) async throws -> LedgerResult? {
        guard let pack = try await pack(tx, id: packID), pack.isActive else { throw EntitlementError.packNotFound }
        guard canMakePurchases else { throw EntitlementError.purchaseNotAllowed }
        guard isLocked(pack, plan: plan, bought: []) else {
            throw EntitlementError.alreadyUnlocked(pack.isPremium ? "This pack is included in your plan." : "This pack is free.")
        }
        let now = clock.now()
        let claimed = try await tx.query(
            "INSERT INTO pack_unlocks (user_id, pack_id, tokens_spent, created_at_ms) VALUES (?, ?, ?, ?) ON CONFLICT (user_id, pack_id) DO NOTHING RETURNING pack_id",
            [userID, packID, pack.tokenPrice, now])
        guard !claimed.isEmpty else { throw EntitlementError.alreadyUnlocked("You already unlocked this pack.") }
        guard pack.tokenPrice > 0 else {
            try await emitUnlocked(tx, userID: userID, packID: packID, tokens: 0, operationID: nil, now: now)
            return nil
        }
        let profile = attribution.map { #","profileId":"\#($0.profileID)""# } ?? ""
        let spent = try await ledger.spend(
            tx, userID: userID, amountTokens: pack.tokenPrice, reason: "pack_unlock", metadata: #"{"packId":"\#(packID)"\#(profile)}"#,
            attribution: attribution)
        try await tx.query("UPDATE pack_unlocks SET operation_id = ? WHERE user_id = ? AND pack_id = ?", [spent.operationId, userID, packID])
        try await emitUnlocked(tx, userID: userID, packID: packID, tokens: pack.tokenPrice, operationID: spent.operationId, now: now)
        return spent
    }

    func emitUnlocked(_ tx: any SQLExecutor, userID: String, packID: String, tokens: Int64, operationID: String?, now: Date) async throws {
        try await events.emit(
            tx,
            DomainEvent(
                type: "pack.unlocked", userID: userID,
                data: ["userId": .string(userID), "packId": .string(packID), "tokensSpent": .int(tokens), "operationId": .optional(operationID)]),
            at: now)
    }

    /// The pack an operation paid for (a reversal's caller reports that the unlock stays), or nil.
    public func packUnlocked(byOperation operationID: String, _ tx: any SQLExecutor) async throws -> String? {
        try await tx.first("SELECT pack_id FROM pack_unlocks WHERE operation_id = ?", [operationID])?.optionalString("pack_id")
    }
}
