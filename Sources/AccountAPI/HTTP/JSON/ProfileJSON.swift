import Auth

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

    init(_ profile: FamilyProfile, isLocked: Bool = false) {
        id = profile.id
        name = profile.name
        avatar = profile.avatar
        isDefault = profile.isDefault
        canMakePurchases = profile.canMakePurchases
        canUseCustomContentTypes = profile.canUseCustomContentTypes
        hasPin = profile.hasPin
        self.isLocked = isLocked
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

    var input: ProfileInput {
        ProfileInput(
            name: name, avatar: avatar, pin: pin, removePin: removePin ?? false, canMakePurchases: canMakePurchases ?? false,
            canUseCustomContentTypes: canUseCustomContentTypes ?? false)
    }
}
