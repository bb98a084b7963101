import Foundation
import Storage

/// What Entitlements needs of accounts and profiles, which Auth owns; injected at wiring.
public protocol AccountDirectory: Sendable {
    /// True when `userID` is a live (not erased) user. `lock`: the account's row is share-locked, so an erasure waits for
    /// a write that asked first (ask before taking the ledger's locks); without it, only a refusal's answer is decided by
    /// it (asked after the ledger's locks, nothing posted).
    func isActiveUser(_ userID: String, _ tx: any SQLExecutor, lock: Bool) async throws -> Bool
    /// How many family profiles the account has (the default one included).
    func profileCount(userID: String, _ tx: any SQLExecutor) async throws -> Int
    /// The account's profile `profileID`: its permissions, its place in the account's order (0 = the default profile)
    /// and its allowance; nil when the account has no such profile.
    func profile(userID: String, profileID: String, _ tx: any SQLExecutor) async throws -> ProfileAccess?
    /// The profile part of the entitlement snapshot statement (see ``SnapshotStatement``): columns `profile_id`,
    /// `profile_name`, `profile_can_make_purchases`, `profile_can_use_custom_content_types`.
    func snapshotProfileFragment(engine: Engine) -> SQLJoinFragment
}

/// What a charge made for a profile needs to know of it.
public struct ProfileAccess: Sendable, Equatable {
    public let permissions: ProfilePermissions
    /// The profile's place in the account's order: usable while below the plan's `maxFamilyProfiles`.
    public let rank: Int
    public let isDefault: Bool
    /// Tokens per allowance period; nil: no cap.
    public let monthlyTokenAllowance: Int64?

    public init(permissions: ProfilePermissions, rank: Int, isDefault: Bool, monthlyTokenAllowance: Int64?) {
        (self.permissions, self.rank, self.isDefault, self.monthlyTokenAllowance) = (permissions, rank, isDefault, monthlyTokenAllowance)
    }
}

extension AccountDirectory {
    public func isActiveUser(_ userID: String, _ tx: any SQLExecutor) async throws -> Bool { try await isActiveUser(userID, tx, lock: true) }
}
