import Foundation
import Storage

/// What Entitlements needs of accounts and profiles, which Auth owns; injected at wiring.
public protocol AccountDirectory: Sendable {
    /// True when `userID` is a live (not erased) user.
    func isActiveUser(_ userID: String, _ tx: any SQLExecutor) async throws -> Bool
    /// How many family profiles the account has (the default one included).
    func profileCount(userID: String, _ tx: any SQLExecutor) async throws -> Int
    /// The account's profile `profileID` as the snapshot sees it (permissions and its place in the account's order, 0 =
    /// the default profile); nil when the account has no such profile.
    func profile(userID: String, profileID: String, _ tx: any SQLExecutor) async throws -> (ProfilePermissions, rank: Int)?
    /// The profile part of the entitlement snapshot statement (see ``SnapshotStatement``): columns `profile_id`,
    /// `profile_name`, `profile_can_make_purchases`, `profile_can_use_custom_content_types`.
    func snapshotProfileFragment(engine: Engine) -> SQLJoinFragment
}
