import Auth
import Entitlements
import Ledger

/// A profile as apps see it: the seed's `FamilyProfile` plus `isLocked` (beyond the plan's limit).
struct ProfileJSON: Encodable, Sendable {
    let id: String
    let name: String
    let avatar: String?
    let isDefault: Bool
    let canMakePurchases: Bool
    let canUseCustomContentTypes: Bool
    let hasPin: Bool
    let isLocked: Bool
    let monthlyTokenAllowance: Int64?
    let maxContentRating: String?

    init(_ profile: FamilyProfile, isLocked: Bool = false) {
        id = profile.id
        name = profile.name
        avatar = profile.avatar
        isDefault = profile.isDefault
        canMakePurchases = profile.canMakePurchases
        canUseCustomContentTypes = profile.canUseCustomContentTypes
        hasPin = profile.hasPin
        self.isLocked = isLocked
        monthlyTokenAllowance = profile.monthlyTokenAllowance
        maxContentRating = profile.maxContentRating
    }

    init(_ view: ProfileView) { self.init(view.profile, isLocked: view.isLocked) }
}

/// The seed's `CreateProfileRequest`, also used for updates, plus `removePin` and `currentPassword`.
struct ProfileRequest: Decodable {
    let name: String
    let avatar: String?
    let pin: String?
    let removePin: Bool?
    let canMakePurchases: Bool?
    let canUseCustomContentTypes: Bool?
    let currentPassword: String?
    let monthlyTokenAllowance: Int64?
    let removeMonthlyTokenAllowance: Bool?
    let maxContentRating: ContentRating?
    let removeMaxContentRating: Bool?

    var input: ProfileInput {
        ProfileInput(
            name: name, avatar: avatar, pin: pin, removePin: removePin ?? false, canMakePurchases: canMakePurchases ?? false,
            canUseCustomContentTypes: canUseCustomContentTypes ?? false, monthlyTokenAllowance: monthlyTokenAllowance,
            removeMonthlyTokenAllowance: removeMonthlyTokenAllowance ?? false, maxContentRating: maxContentRating?.rawValue,
            removeMaxContentRating: removeMaxContentRating ?? false)
    }
}

/// `GET /api/family-profiles/{id}/usage`: the allowance period, the cap (null: none) and what was used, is held and remains.
struct ProfileUsageJSON: ExplicitNulls, Sendable {
    struct Period: Encodable, Sendable { let start: String; let end: String }
    let profileId: String
    let period: Period
    let allowance: Int64?
    let used: Int64
    let held: Int64
    let remaining: Int64?

    init(_ view: ProfileUsageView) {
        profileId = view.profileID
        period = Period(start: ISODate.string(view.period.start), end: ISODate.string(view.period.end))
        (allowance, used, held, remaining) = (view.allowance, view.usage.used, view.usage.held, view.remaining)
    }
}

extension ProfilePermissions {
    /// What Entitlements needs of an Auth profile; a stored maximum off the scale counts as the strictest (`all`).
    init(_ profile: FamilyProfile) {
        self.init(
            id: profile.id, name: profile.name, canMakePurchases: profile.canMakePurchases,
            canUseCustomContentTypes: profile.canUseCustomContentTypes,
            maxContentRating: profile.maxContentRating.map { ContentRating(text: $0) ?? .all })
    }
}
