// The app's own Codable structs from seed 004, declared exactly as the client declares them, so the
// tests prove our JSON decodes with them unchanged.

struct SeedSignUpResponse: Codable {
    let success: Bool
    let message: String
    let requiresVerification: Bool
}

struct SeedVerifyOTPResponse: Codable {
    let success: Bool
    let message: String
    let user: SeedUser?
    let welcomeTokens: Int?
}

struct SeedSignInResponse: Codable {
    let user: SeedUser
    let session: SeedSession
}

struct SeedUser: Codable {
    let id: String
    let email: String
    let name: String
    let emailVerified: Bool
    let role: String
    let promptEnhancementEnabled: Bool
}

struct SeedSession: Codable {
    let id: String
    let token: String
    let expiresAt: String
}

struct SeedFamilyProfile: Codable {
    let id: String
    let name: String
    let avatar: String?
    let isDefault: Bool
    let canMakePurchases: Bool
    let canUseCustomContentTypes: Bool
    let hasPin: Bool
}

/// Our verify response also carries the session (extra fields do not break the seed struct).
struct SeedVerifyOTPResponseWithSession: Codable {
    let user: SeedUser
    let welcomeTokens: Int
    let session: SeedSession
}

struct SeedSubscriptionPlan: Codable {
    let id: String
    let name: String
    let description: String
    let monthlyTokens: Int
    let price: Double
    let currency: String
    let features: SeedSubscriptionFeatures
    let platform: String
    let appleProductId: String?
    let stripePriceId: String?
    let trialDays: Int
    let isActive: Bool
    let sortOrder: Int
    let hasQualitySelector: Bool
    let hasCommercialLicense: Bool
    let hasModelSelector: Bool
    let hasImageUpload: Bool
    let maxFamilyProfiles: Int
    let isFreeTier: Bool
}

struct SeedSubscriptionFeatures: Codable {
    let allStyles: Bool
    let familyProfiles: Bool
    let qualitySelector: Bool
    let modelSelector: Bool
    let commercialLicense: Bool
    let prioritySupport: Bool
    let tokenRollover: String?
    let savings: String?
}

struct SeedTokenBalance: Codable {
    let subscriptionTokens: Int
    let purchasedTokens: Int
    let totalTokens: Int
    let lastSubscriptionRefresh: String?
    let maxRollover: Int
    let currentPlan: SeedSubscriptionPlan?
}

struct SeedFeatureAccess: Codable {
    let hasQualitySelector: Bool
    let hasCommercialLicense: Bool
    let hasModelSelector: Bool
    let hasImageUpload: Bool
    let maxFamilyProfiles: Int
    let canCreateMoreProfiles: Bool
    let currentProfileCount: Int
}

/// Seed 000's sticker pack structs.
struct SeedStickerPack: Codable {
    let id: String
    let name: String
    let description: String?
    let iconUrl: String?
    let category: String
    let stickerCount: Int
    let isLocked: Bool
    let previewStickers: [String]
}

struct SeedStickerPacksResponse: Codable {
    let packs: [SeedStickerPack]
}
