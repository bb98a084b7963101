import Foundation
import Storage

/// A user as the app's `User` struct shows it (seed 004).
public struct User: Codable, Sendable, Equatable {
    public let id: String
    public let email: String
    public let name: String
    public let emailVerified: Bool
    public let role: String
    public let promptEnhancementEnabled: Bool

    init(row: SQLRow) throws {
        id = try row.string("id")
        email = row.optionalString("email") ?? ""
        name = try row.string("name")
        emailVerified = try row.bool("email_verified")
        role = try row.string("role")
        promptEnhancementEnabled = try row.bool("prompt_enhancement_enabled")
    }

    static let columns = "id, email, name, email_verified, role, prompt_enhancement_enabled"
}

/// A family profile as the app's `FamilyProfile` struct shows it (the PIN itself is never returned).
public struct FamilyProfile: Codable, Sendable, Equatable {
    public let id: String
    public let name: String
    public let avatar: String?
    public let isDefault: Bool
    public let canMakePurchases: Bool
    public let canUseCustomContentTypes: Bool
    public let hasPin: Bool
    /// Tokens this profile may use per allowance period (nil: no cap); set by the owner.
    public let monthlyTokenAllowance: Int64?
    /// The highest content rating the profile may see (nil: no maximum); set by the owner, validated by the caller's scale.
    public let maxContentRating: String?

    init(row: SQLRow) throws {
        id = try row.string("id")
        name = try row.string("name")
        avatar = row.optionalString("avatar")
        isDefault = try row.bool("is_default")
        canMakePurchases = try row.bool("can_make_purchases")
        canUseCustomContentTypes = try row.bool("can_use_custom_content_types")
        hasPin = row.optionalString("pin_hash") != nil
        monthlyTokenAllowance = row.optionalInt("monthly_token_allowance")
        maxContentRating = row.optionalString("max_content_rating")
    }

    static let columns =
        "id, name, avatar, is_default, can_make_purchases, can_use_custom_content_types, pin_hash, monthly_token_allowance, max_content_rating"
}

/// A freshly issued session: the only moment the bearer token exists outside the client.
public struct IssuedSession: Sendable, Equatable {
    public let id: String
    public let token: String
    public let expiresAt: Date
}

/// A session found from its bearer token.
public struct AuthenticatedSession: Sendable {
    public let sessionID: String
    public let user: User
    public let createdAt: Date
    public let lastUsedAt: Date
    public let expiresAt: Date
    public let authenticatedAt: Date
    public let selectedProfileID: String?
    /// True when the session acts as the account's owner (no profile selected, or the default one): account actions
    /// (sessions, password, erasure, token history) need it.
    public let isOwnerProfile: Bool
    /// The selected profile no longer exists: the session must select one (it never falls back to the owner's).
    public let selectedProfileGone: Bool
}

/// One row of `GET /api/auth/sessions`.
public struct SessionSummary: Codable, Sendable, Equatable {
    public let id: String
    public let createdAt: Date
    public let lastUsedAt: Date
    public let expiresAt: Date
    public let userAgent: String?
    public let ip: String?
    public let current: Bool
}

/// Who is calling and from where (for throttles, devices and the audit log).
public struct ClientInfo: Sendable {
    public let ip: String
    public let userAgent: String?
    public init(ip: String, userAgent: String?) {
        self.ip = ip
        self.userAgent = userAgent.map { InputRules.truncated($0, bytes: 512) }
    }

    /// "user agent + IP family": a sign-in from another browser/app or network family is a new device.
    var ipFamily: String { ip.contains(":") ? "ipv6" : "ipv4" }
}
