import Foundation
import Storage

/// What other modules may know of profiles, without reading `family_profiles` themselves.
extension ProfileService {
    /// How many profiles the account has (the default one included).
    public static func count(userID: String, _ tx: any SQLExecutor) async throws -> Int {
        Int(try await tx.first("SELECT COUNT(*) AS n FROM family_profiles WHERE user_id = ?", [userID])?.optionalInt("n") ?? 0)
    }

    /// The account's profile `profileID` and its place in the account's order (0 = the default profile, then oldest
    /// first, as ``snapshotFragment(engine:)`` counts it); nil when the account has no such profile.
    public static func ranked(userID: String, profileID: String, _ tx: any SQLExecutor) async throws -> (FamilyProfile, rank: Int)? {
        // One statement (a reserve for a profile runs it on every call): the row and how many profiles come before it.
        let columns = FamilyProfile.columns.split(separator: ",").map { "p." + $0.trimmingCharacters(in: .whitespaces) }.joined(separator: ", ")
        guard
            let row = try await tx.first(
                """
                SELECT \(columns), CASE WHEN p.is_default THEN 0 ELSE (
                  SELECT COUNT(*) FROM family_profiles o WHERE o.user_id = p.user_id
                    AND (o.is_default OR o.created_at_ms < p.created_at_ms OR (o.created_at_ms = p.created_at_ms AND o.id < p.id))) END AS profile_rank
                FROM family_profiles p WHERE p.id = ? AND p.user_id = ?
                """, [profileID, userID])
        else { return nil }
        return (try FamilyProfile(row: row), Int(try row.int("profile_rank")))
    }

    /// The maximum content rating of the profile a session acts as, as a column `profile_max_content_rating` of a
    /// statement over ``AuthService/checkedSessionQuery`` rows aliased `x`: NULL with no selection (the owner's default
    /// profile), '' for a selected profile without a maximum, `!` when the selected profile is gone.
    public static let sessionRatingColumn = """
        CASE WHEN x.selected_profile_id IS NULL THEN NULL ELSE COALESCE(
          (SELECT COALESCE(max_content_rating, '') FROM family_profiles WHERE id = x.selected_profile_id AND user_id = x.id), '!') END
          AS profile_max_content_rating
        """

    /// The profile part of the entitlement snapshot statement. The embedding statement provides `x.id` (the user),
    /// `x.selected_profile_id` and `n.with_profile`. Yields the selected profile, or the account's default one when none
    /// is selected; all NULL without `with_profile` or when the selected profile is gone (the session must select again,
    /// it never falls back to the owner's profile). Columns: `profile_id`, `profile_name`, `profile_can_make_purchases`,
    /// `profile_can_use_custom_content_types`, `profile_max_content_rating` and `profile_rank`, the profile's place in the account's order (0 = the
    /// default profile, then oldest first): a profile is usable while `profile_rank` < the plan's `maxFamilyProfiles`, the
    /// rule ``ProfileService/available(userID:logger:)`` applies (`ProfileFragmentTests` pins both).
    ///
    /// The selected profile is a lookup by primary key and, only when none is selected, the default one by its unique
    /// partial index; the rank is counted only for a selected non-default profile (a handful of rows of one account). On
    /// PostgreSQL each lookup is a lateral subquery with `LIMIT 1`, which keeps the planner from flattening it into a plain
    /// join (flattened, the default profile was looked up for every session; callgrind: 4.8 % fewer instructions per
    /// 8-session statement). SQLite has no LATERAL; it tests a join's conditions on outer tables before scanning the inner one.
    public static func snapshotFragment(engine: Engine) -> SQLJoinFragment {
        let select = """
            COALESCE(ps.id, pd.id) AS profile_id, COALESCE(ps.name, pd.name) AS profile_name,
              COALESCE(ps.can_make_purchases, pd.can_make_purchases) AS profile_can_make_purchases,
              COALESCE(ps.can_use_custom_content_types, pd.can_use_custom_content_types) AS profile_can_use_custom_content_types,
              COALESCE(ps.max_content_rating, pd.max_content_rating) AS profile_max_content_rating,
              CASE WHEN ps.id IS NULL OR ps.is_default THEN 0 ELSE (
                SELECT COUNT(*) FROM family_profiles o WHERE o.user_id = x.id
                  AND (o.is_default OR o.created_at_ms < ps.created_at_ms OR (o.created_at_ms = ps.created_at_ms AND o.id < ps.id))) END AS profile_rank
            """
        let columns = [
            "profile_id", "profile_name", "profile_can_make_purchases", "profile_can_use_custom_content_types", "profile_max_content_rating",
            "profile_rank",
        ]
        guard engine == .postgres else {
            return SQLJoinFragment(
                select: select,
                joins: """
                    LEFT JOIN family_profiles ps ON n.with_profile AND ps.id = x.selected_profile_id AND ps.user_id = x.id
                    LEFT JOIN family_profiles pd ON n.with_profile AND x.selected_profile_id IS NULL AND pd.user_id = x.id AND pd.is_default
                    """, columns: columns)
        }
        let profile = "id, name, can_make_purchases, can_use_custom_content_types, max_content_rating, is_default, created_at_ms"
        return SQLJoinFragment(
            select: select,
            joins: """
                LEFT JOIN LATERAL (
                  SELECT \(profile) FROM family_profiles WHERE n.with_profile AND id = x.selected_profile_id AND user_id = x.id LIMIT 1) ps ON TRUE
                LEFT JOIN LATERAL (
                  SELECT \(profile) FROM family_profiles WHERE n.with_profile AND x.selected_profile_id IS NULL AND user_id = x.id AND is_default
                  LIMIT 1) pd ON TRUE
                """, columns: columns)
    }
}

extension AuthService {
    /// True when `userID` is a live (not erased) user; in the caller's transaction.
    /// With `lock`, the row is share-locked: the ledger, entitlement and subscription writes that ask before they post
    /// for the user either commit before an erasure of the account (which then forfeits what they posted) or see it
    /// erased. A question asked after the ledger's locks (a refusal's answer) takes none: the erasure takes the row first.
    public static func isActiveUser(_ userID: String, _ tx: any SQLExecutor, lock: Bool = true) async throws -> Bool {
        try await UserStore().isLive(tx, id: userID, share: lock)
    }
}
