import Foundation

/// One priced action of the rate card (plans.json's `actions`): what a unit costs in tokens, how many units one call may
/// take, which plans may use it, and the attributes that change the price or are gated per plan.
public struct PricedAction: Codable, Sendable, Equatable {
    /// Stable id, e.g. `generate.coloring_pages` (letters, digits, `_`, `-`, `.`; it names the hold it reserves).
    public let id: String
    /// How history and apps name it, e.g. "Coloring page".
    public let name: String
    /// The price of one unit before attributes.
    public let tokensPerUnit: Int
    /// The most units one reservation may take (e.g. 4 images per generation).
    public let maxQuantity: Int
    /// The plans that may use it at all; nil: every plan.
    public let plans: [String]?
    /// A profile permission the acting profile needs (`canUseCustomContentTypes` or `canMakePurchases`).
    public let requiresProfilePermission: String?
    /// Who may take it (``ContentRating``); nil: open to every profile.
    public let contentRating: ContentRating?
    public let attributes: [PricedAttribute]
}

/// An attribute of a priced action (e.g. `quality`); a call that does not name it gets `defaultValue`.
public struct PricedAttribute: Codable, Sendable, Equatable {
    public let name: String
    public let defaultValue: String
    public let values: [PricedValue]
}

/// One value of an attribute: what it adds to each unit's price and which plans may choose it (nil: every plan).
public struct PricedValue: Codable, Sendable, Equatable {
    public let value: String
    public let extraTokensPerUnit: Int
    public let plans: [String]?
}

/// Why a plan or a profile may not take an action now (the reasons `POST /api/entitlements/check` gives).
public enum Refusal: String, Error, Sendable, Equatable, Codable, CaseIterable {
    case subscriptionRequired = "subscription_required"
    case featureNotInPlan = "feature_not_in_plan"
    case profileRestricted = "profile_restricted"
    case packLocked = "pack_locked"
    case purchaseNotAllowed = "purchase_not_allowed"
    /// Rated above the acting profile's maximum content rating.
    case contentRestricted = "content_restricted"
}

/// What one call of a priced action costs, and what history says of it.
public struct PricedQuote: Sendable, Equatable, Codable {
    public let action: String
    public let quantity: Int
    /// Every attribute of the action, defaults filled in.
    public let attributes: [String: String]
    public let tokens: Int64
    /// E.g. "Coloring page, ultra, flux ×2": the action's name, the non-default values, the quantity.
    public let description: String
}

/// The rate card's rules, in one place: validation at start-up, the price of a call, and what a plan allows.
public enum RateCard {
    /// The largest price of one unit and the largest quantity a catalog may name (so a price always fits).
    public static let tokensPerUnitMax = 1_000_000
    public static let quantityMax = 100
    /// The most attributes a call may name, and their longest value, in bytes.
    public static let attributesMax = 16
    public static let valueBytesMax = 64
    static let profilePermissions: Set<String> = ["canUseCustomContentTypes", "canMakePurchases"]

    /// What a call of `actionID` costs on `plan` for a profile with `permissions` (nil: no profile named), or why not.
    /// An unknown action, attribute or value, or a quantity out of range, is `EntitlementError.invalid`.
    public static func quote(
        _ catalog: PlanCatalog, actionID: String, quantity: Int?, attributes: [String: String], plan: SubscriptionPlan,
        permissions: ProfilePermissions?
    ) throws(EntitlementError) -> Result<PricedQuote, Refusal> {
        guard let action = catalog.pricedActions.first(where: { $0.id == actionID }) else {
            let known = catalog.pricedActions.map(\.id).joined(separator: ", ")
            throw .invalid(["unknown action '\(quoted(actionID))'; known: \(known.isEmpty ? "none" : known)"])
        }
        let quantity = quantity ?? 1
        guard (1...action.maxQuantity).contains(quantity) else {
            throw .invalid(["quantity must be from 1 to \(action.maxQuantity) for \(action.id)"])
        }
        guard attributes.count <= attributesMax else { throw .invalid(["at most \(attributesMax) attributes"]) }
        for name in attributes.keys.sorted() where !action.attributes.contains(where: { $0.name == name }) {
            let known = action.attributes.map(\.name).joined(separator: ", ")
            throw .invalid(["\(action.id) has no attribute '\(quoted(name))'; known: \(known.isEmpty ? "none" : known)"])
        }
        if !allows(action.plans, plan) { return .failure(refusal(plan)) }
        var perUnit = Int64(action.tokensPerUnit)
        var chosen: [String: String] = [:]
        var named: [String] = []
        for attribute in action.attributes {
            let value = attributes[attribute.name] ?? attribute.defaultValue
            guard let priced = attribute.values.first(where: { $0.value == value }) else {
                throw .invalid([
                    "\(attribute.name) must be one of \(attribute.values.map(\.value).joined(separator: ", ")), not '\(quoted(value))'"
                ])
            }
            if !allows(priced.plans, plan) { return .failure(refusal(plan)) }
            perUnit += Int64(priced.extraTokensPerUnit)
            chosen[attribute.name] = value
            if value != attribute.defaultValue { named.append(value) }
        }
        if let permission = action.requiresProfilePermission, let permissions, !has(permissions, permission) {
            return .failure(.profileRestricted)
        }
        if let rating = action.contentRating, !ContentRating.allows(rating, under: permissions?.maxContentRating) {
            return .failure(.contentRestricted)
        }
        let description = ([action.name] + named).joined(separator: ", ") + (quantity > 1 ? " ×\(quantity)" : "")
        return .success(
            PricedQuote(action: action.id, quantity: quantity, attributes: chosen, tokens: perUnit * Int64(quantity), description: description))
    }

    /// What `plan` allows a profile with `maxRating` (nil: no maximum): each action it may use, with the values of each
    /// attribute it may choose.
    public static func allowed(_ catalog: PlanCatalog, plan: SubscriptionPlan, maxRating: ContentRating? = nil) -> [String: [String: [String]]] {
        var allowed: [String: [String: [String]]] = [:]
        for action in catalog.pricedActions
        where allows(action.plans, plan) && ContentRating.allows(action.contentRating ?? .all, under: maxRating) {
            var values: [String: [String]] = [:]
            for attribute in action.attributes { values[attribute.name] = attribute.values.filter { allows($0.plans, plan) }.map(\.value) }
            allowed[action.id] = values
        }
        return allowed
    }

    static func allows(_ plans: [String]?, _ plan: SubscriptionPlan) -> Bool { plans?.contains(plan.id) ?? true }

    /// A caller's value as a detail quotes it: at most 64 characters, control characters left out.
    static func quoted(_ value: String) -> String {
        String(String.UnicodeScalarView(value.unicodeScalars.filter { !CharacterSet.controlCharacters.contains($0) }.prefix(valueBytesMax)))
    }

    /// A free plan needs a subscription; a paid one needs another plan.
    static func refusal(_ plan: SubscriptionPlan) -> Refusal { plan.isFreeTier ? .subscriptionRequired : .featureNotInPlan }

    static func has(_ permissions: ProfilePermissions, _ permission: String) -> Bool {
        permission == "canMakePurchases" ? permissions.canMakePurchases : permissions.canUseCustomContentTypes
    }

    /// Every problem of the catalog's actions (run with the plans' validation at start-up).
    static func problems(_ actions: [PricedAction], planIDs: Set<String>) -> [String] {
        var problems: [String] = []
        var ids = Set<String>()
        func checkPlans(_ plans: [String]?, at place: String) {
            for id in plans ?? [] where !planIDs.contains(id) { problems.append("\(place): unknown plan '\(id)'") }
        }
        for action in actions {
            let place = "action '\(action.id)'"
            if !ids.insert(action.id).inserted { problems.append("duplicate action id '\(action.id)'") }
            if action.id.isEmpty || action.id.count > 64
                || !action.id.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "_-.".contains($0)) })
            {
                problems.append("\(place): id must be 1 to 64 letters, digits, '_', '-' or '.'")
            }
            if action.name.isEmpty || action.name.count > 64 { problems.append("\(place): name must be 1 to 64 characters") }
            if !(1...tokensPerUnitMax).contains(action.tokensPerUnit) {
                problems.append("\(place): tokensPerUnit must be from 1 to \(tokensPerUnitMax)")
            }
            if !(1...quantityMax).contains(action.maxQuantity) { problems.append("\(place): maxQuantity must be from 1 to \(quantityMax)") }
            if let permission = action.requiresProfilePermission, !profilePermissions.contains(permission) {
                problems.append("\(place): requiresProfilePermission must be one of \(profilePermissions.sorted().joined(separator: ", "))")
            }
            checkPlans(action.plans, at: place)
            if action.attributes.count > attributesMax { problems.append("\(place): at most \(attributesMax) attributes") }
            var names = Set<String>()
            for attribute in action.attributes {
                let at = "\(place).\(attribute.name)"
                if !names.insert(attribute.name).inserted { problems.append("\(place): duplicate attribute '\(attribute.name)'") }
                if attribute.values.isEmpty { problems.append("\(at): needs at least one value") }
                if !attribute.values.contains(where: { $0.value == attribute.defaultValue }) { problems.append("\(at): defaultValue is not a value") }
                if let value = attribute.values.first(where: { $0.value == attribute.defaultValue }), value.plans != nil {
                    problems.append("\(at): the default value must be open to every plan")
                }
                var values = Set<String>()
                for value in attribute.values {
                    if !values.insert(value.value).inserted { problems.append("\(at): duplicate value '\(value.value)'") }
                    if value.value.isEmpty || value.value.utf8.count > valueBytesMax {
                        problems.append("\(at): values must be 1 to \(valueBytesMax) bytes")
                    }
                    if !(0...tokensPerUnitMax).contains(value.extraTokensPerUnit) {
                        problems.append("\(at).\(value.value): extraTokensPerUnit must be from 0 to \(tokensPerUnitMax)")
                    }
                    checkPlans(value.plans, at: "\(at).\(value.value)")
                }
            }
        }
        return problems
    }
}
