import Foundation

/// Marketing feature flags of a plan, exactly the seed's `SubscriptionFeatures`.
public struct SubscriptionFeatures: Codable, Sendable, Equatable {
    public let allStyles: Bool
    public let familyProfiles: Bool
    public let qualitySelector: Bool
    public let modelSelector: Bool
    public let commercialLicense: Bool
    public let prioritySupport: Bool
    public let tokenRollover: String?
    public let savings: String?
}

/// How long a plan's billing period is. Tokens are granted monthly either way: a yearly plan gets its `monthlyTokens`
/// each month of its period (``SubscriptionMachine/dripYearlyPlans``).
public enum PlanInterval: String, Codable, Sendable, Equatable {
    case month, year

    var calendarComponent: Calendar.Component { self == .year ? .year : .month }
}

/// One plan: every field of the seed's `SubscriptionPlan`, plus `interval`, `maxRollover` and `includedStickerPacks`.
public struct SubscriptionPlan: Codable, Sendable, Equatable {
    public let id: String
    public let name: String
    public let description: String
    public let monthlyTokens: Int
    /// In cents (the seed declares it as a Double).
    public let price: Double
    public let currency: String
    /// The billing period (`month` or `year`).
    public let interval: PlanInterval
    public let features: SubscriptionFeatures
    public let platform: String
    public let appleProductId: String?
    public let stripePriceId: String?
    public let trialDays: Int
    public let isActive: Bool
    public let sortOrder: Int
    public let hasQualitySelector: Bool
    public let hasCommercialLicense: Bool
    public let hasModelSelector: Bool
    public let hasImageUpload: Bool
    public let maxFamilyProfiles: Int
    public let isFreeTier: Bool
    /// Subscription-bucket tokens kept at a period change; the rest expire.
    public let maxRollover: Int
    /// Premium sticker packs this plan includes while it is current.
    public let includedStickerPacks: [String]?
    /// Whether a family member who receives the plan through Apple Family Sharing also receives its monthly tokens
    /// (absent: no, only the purchaser does; the member gets the features).
    public let familySharedTokens: Bool?
    /// The App Store offers of this plan's product that the service signs, by kind (absent: none). The app asks for one
    /// by id; Apple checks only the signature, so this list is the only place that decides which offer anyone gets.
    public let appleOffers: AppleOfferIDs?
}

/// A plan's App Store offer identifiers (App Store Connect), per kind of offer.
public struct AppleOfferIDs: Codable, Sendable, Equatable {
    public let promotional: [String]?
    public let winBack: [String]?
}

/// A consumable bundle of tokens.
public struct TokenPack: Codable, Sendable, Equatable {
    public let id: String
    public let tokens: Int
    /// In cents.
    public let price: Int
    public let currency: String
    public let appleProductId: String?
    public let stripePriceId: String?
}

/// The catalog read from `plans.json`: the only place plans live.
public struct PlanCatalog: Codable, Sendable, Equatable {
    public let welcomeTokens: Int
    public let plans: [SubscriptionPlan]
    public let tokenPacks: [TokenPack]
    /// The rate card (optional in the file): what each priced action costs and which plans may use it (``RateCard``).
    public let actions: [PricedAction]?

    /// The rate card's actions (none when the file has no `actions`).
    public var pricedActions: [PricedAction] { actions ?? [] }
    /// The free tier (validation guarantees exactly one; the fallback, no tokens and no features, is never reached).
    public var freePlan: SubscriptionPlan { plans.first(where: \.isFreeTier) ?? Self.noFeatures }

    static let noFeatures = SubscriptionPlan(
        id: "free", name: "Free", description: "", monthlyTokens: 0, price: 0, currency: "USD", interval: .month,
        features: SubscriptionFeatures(
            allStyles: false, familyProfiles: false, qualitySelector: false, modelSelector: false, commercialLicense: false,
            prioritySupport: false, tokenRollover: nil, savings: nil),
        platform: "both", appleProductId: nil, stripePriceId: nil, trialDays: 0, isActive: false, sortOrder: 0,
        hasQualitySelector: false, hasCommercialLicense: false, hasModelSelector: false, hasImageUpload: false,
        maxFamilyProfiles: 1, isFreeTier: true, maxRollover: 0, includedStickerPacks: nil, familySharedTokens: nil, appleOffers: nil)
    public func plan(id: String) -> SubscriptionPlan? { plans.first { $0.id == id } }
    /// Active plans in `sortOrder`, as `GET /api/subscription-plans` lists them.
    public var activePlans: [SubscriptionPlan] { plans.filter(\.isActive).sorted { $0.sortOrder < $1.sortOrder } }

    /// The repository's `plans.json` as compiled in (the catalog when no `PLANS_FILE` is given).
    public static var builtIn: PlanCatalog {
        get throws(PlanCatalogError) { try parse(Data(BuiltInPlans.json.utf8)) }
    }

    /// Loads and validates a catalog file.
    public static func load(path: String) throws(PlanCatalogError) -> PlanCatalog {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw PlanCatalogError(problems: ["cannot read plans file '\(path)'"])
        }
        return try parse(data)
    }

    /// Parses and validates catalog JSON, listing every problem found at once.
    public static func parse(_ data: Data) throws(PlanCatalogError) -> PlanCatalog {
        var problems = unknownKeyProblems(data)
        let catalog: PlanCatalog
        do {
            catalog = try JSONDecoder().decode(PlanCatalog.self, from: data)
        } catch let error as DecodingError {
            problems.append(describe(error))
            throw PlanCatalogError(problems: problems)
        } catch {
            throw PlanCatalogError(problems: problems + ["not valid JSON"])
        }
        problems += catalog.ruleProblems()
        guard problems.isEmpty else { throw PlanCatalogError(problems: problems) }
        return catalog
    }

    func ruleProblems() -> [String] {
        var problems: [String] = []
        if welcomeTokens < 0 { problems.append("welcomeTokens must not be negative") }
        let freeTiers = plans.filter(\.isFreeTier)
        if freeTiers.count != 1 { problems.append("exactly one plan must have isFreeTier: true (found \(freeTiers.count))") }
        var seenIDs = Set<String>()
        var seenProducts = Set<String>()
        for plan in plans {
            if !seenIDs.insert(plan.id).inserted { problems.append("duplicate id '\(plan.id)'") }
            if plan.id.isEmpty { problems.append("a plan has an empty id") }
            for (field, value) in [
                ("monthlyTokens", plan.monthlyTokens), ("trialDays", plan.trialDays), ("maxFamilyProfiles", plan.maxFamilyProfiles),
                ("maxRollover", plan.maxRollover), ("price", Int(plan.price)),
            ] where value < 0 {
                problems.append("plan '\(plan.id)': \(field) must not be negative")
            }
            if plan.maxFamilyProfiles < 1 { problems.append("plan '\(plan.id)': maxFamilyProfiles must be at least 1 (the default profile)") }
            if !["web", "ios", "both"].contains(plan.platform) { problems.append("plan '\(plan.id)': platform must be web, ios or both") }
            if let offers = plan.appleOffers {
                if plan.appleProductId == nil { problems.append("plan '\(plan.id)': appleOffers need an appleProductId") }
                for id in (offers.promotional ?? []) + (offers.winBack ?? []) where id.wholeMatch(of: /[A-Za-z0-9._\-]{1,100}/) == nil {
                    problems.append("plan '\(plan.id)': offer id '\(id.prefix(100))' must be 1 to 100 letters, digits, '.', '_' or '-'")
                }
            }
            for product in [plan.appleProductId, plan.stripePriceId].compactMap({ $0 }) where !seenProducts.insert(product).inserted {
                problems.append("duplicate product id '\(product)'")
            }
        }
        for pack in tokenPacks {
            if !seenIDs.insert(pack.id).inserted { problems.append("duplicate id '\(pack.id)'") }
            if pack.tokens <= 0 { problems.append("token pack '\(pack.id)': tokens must be positive") }
            if pack.price < 0 { problems.append("token pack '\(pack.id)': price must not be negative") }
            for product in [pack.appleProductId, pack.stripePriceId].compactMap({ $0 }) where !seenProducts.insert(product).inserted {
                problems.append("duplicate product id '\(product)'")
            }
        }
        problems += RateCard.problems(pricedActions, planIDs: Set(plans.map(\.id)))
        return problems
    }

    static let allowedKeys: [String: Set<String>] = [
        "catalog": ["welcomeTokens", "plans", "tokenPacks", "actions"],
        "plan": [
            "id", "name", "description", "monthlyTokens", "price", "currency", "interval", "features", "platform", "appleProductId", "stripePriceId",
            "trialDays", "isActive", "sortOrder", "hasQualitySelector", "hasCommercialLicense", "hasModelSelector", "hasImageUpload",
            "maxFamilyProfiles", "isFreeTier", "maxRollover", "includedStickerPacks", "familySharedTokens", "appleOffers",
        ],
        "appleOffers": ["promotional", "winBack"],
        "features": [
            "allStyles", "familyProfiles", "qualitySelector", "modelSelector", "commercialLicense", "prioritySupport", "tokenRollover", "savings",
        ],
        "tokenPack": ["id", "tokens", "price", "currency", "appleProductId", "stripePriceId"],
        "action": ["id", "name", "tokensPerUnit", "maxQuantity", "plans", "requiresProfilePermission", "contentRating", "attributes"],
        "attribute": ["name", "defaultValue", "values"],
        "value": ["value", "extraTokensPerUnit", "plans"],
    ]

    /// Unknown keys are refused (a typo must not silently drop a setting).
    static func unknownKeyProblems(_ data: Data) -> [String] {
        guard let root = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return [] }
        var problems: [String] = []
        func check(_ object: [String: Any], kind: String, at path: String) {
            for key in object.keys.sorted() where !(allowedKeys[kind]?.contains(key) ?? false) {
                problems.append("unknown key '\(key)' at \(path)")
            }
        }
        check(root, kind: "catalog", at: "the top level")
        for (i, plan) in ((root["plans"] as? [[String: Any]]) ?? []).enumerated() {
            let id = plan["id"] as? String ?? "#\(i)"
            check(plan, kind: "plan", at: "plan '\(id)'")
            if let features = plan["features"] as? [String: Any] { check(features, kind: "features", at: "plan '\(id)'.features") }
            if let offers = plan["appleOffers"] as? [String: Any] { check(offers, kind: "appleOffers", at: "plan '\(id)'.appleOffers") }
        }
        for (i, pack) in ((root["tokenPacks"] as? [[String: Any]]) ?? []).enumerated() {
            check(pack, kind: "tokenPack", at: "token pack '\(pack["id"] as? String ?? "#\(i)")'")
        }
        for (i, action) in ((root["actions"] as? [[String: Any]]) ?? []).enumerated() {
            let id = action["id"] as? String ?? "#\(i)"
            check(action, kind: "action", at: "action '\(id)'")
            for attribute in (action["attributes"] as? [[String: Any]]) ?? [] {
                let name = "action '\(id)'.\(attribute["name"] as? String ?? "?")"
                check(attribute, kind: "attribute", at: name)
                for value in (attribute["values"] as? [[String: Any]]) ?? [] { check(value, kind: "value", at: name) }
            }
        }
        return problems
    }

    static func describe(_ error: DecodingError) -> String {
        func path(_ keys: [any CodingKey]) -> String { keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".") }
        switch error {
        case .keyNotFound(let key, let ctx):
            return "missing key '\(key.stringValue)' at \(path(ctx.codingPath).isEmpty ? "the top level" : path(ctx.codingPath))"
        case .typeMismatch(_, let ctx), .valueNotFound(_, let ctx): return "wrong type at \(path(ctx.codingPath))"
        case .dataCorrupted(let ctx): return "invalid JSON: \(ctx.debugDescription)"
        @unknown default: return "cannot decode plans"
        }
    }
}

/// Every problem found in a plans file.
public struct PlanCatalogError: Error, CustomStringConvertible, Sendable {
    public let problems: [String]
    public var description: String { "invalid plans file:\n" + problems.map { "  - \($0)" }.joined(separator: "\n") }
}
