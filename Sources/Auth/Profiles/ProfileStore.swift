import Foundation
import Storage

/// The `family_profiles` table: every statement that writes it and the reads of the profile flows, in one place (the
/// session lookup and the snapshot and catalog fragments join it for speed, in `SessionStore` and
/// `ProfileService+shared.swift`). Rows come back typed.
struct ProfileStore: Sendable {
    /// The account's profiles: default first, then oldest first (at most 100).
    func all(_ tx: any SQLExecutor, userID: String) async throws -> [FamilyProfile] {
        try await tx.query(
            "SELECT \(FamilyProfile.columns) FROM family_profiles WHERE user_id = ? ORDER BY is_default DESC, created_at_ms, id LIMIT 100", [userID]
        ).map(FamilyProfile.init(row:))
    }

    func profile(_ tx: any SQLExecutor, id: String, userID: String) async throws -> FamilyProfile? {
        try await tx.first("SELECT \(FamilyProfile.columns) FROM family_profiles WHERE id = ? AND user_id = ?", [id, userID]).map(
            FamilyProfile.init(row:))
    }

    func defaultProfile(_ tx: any SQLExecutor, userID: String) async throws -> FamilyProfile? {
        try await tx.first("SELECT \(FamilyProfile.columns) FROM family_profiles WHERE user_id = ? AND is_default", [userID]).map(
            FamilyProfile.init(row:))
    }

    func defaultProfileID(_ tx: any SQLExecutor, userID: String) async throws -> String? {
        try await tx.first("SELECT id FROM family_profiles WHERE user_id = ? AND is_default", [userID])?.optionalString("id")
    }

    /// The ids of the account's profiles.
    func ids(_ tx: any SQLExecutor, userID: String) async throws -> [String] {
        try await tx.query("SELECT id FROM family_profiles WHERE user_id = ?", [userID]).map { try $0.string("id") }
    }

    /// The names of the account's profiles, but `except`'s.
    func names(_ tx: any SQLExecutor, userID: String, except: String? = nil) async throws -> [String] {
        try await tx.query("SELECT name FROM family_profiles WHERE user_id = ? AND id <> ?", [userID, except ?? ""]).map { try $0.string("name") }
    }

    /// The profile's PIN hash (nil: no PIN, or no such profile).
    /// The profile's PIN hash (nil: none, or no such profile).
    func pinHash(_ tx: any SQLExecutor, id: String) async throws -> String? { try await heldPIN(tx, id: id, hold: false) ?? nil }

    /// The profile's PIN hash (`.some(nil)`: none), or nil when there is no such profile; `hold`: the row stays
    /// share-locked until the transaction ends, so a PIN change or a deletion waits.
    func heldPIN(_ tx: any SQLExecutor, id: String, hold: Bool = true) async throws -> String?? {
        try await tx.first("SELECT pin_hash FROM family_profiles WHERE id = ?" + (hold ? tx.dialect.forShare : ""), [id]).map {
            $0.optionalString("pin_hash")
        }
    }

    /// The account's default (owner's) profile, with every permission.
    func insertDefault(_ tx: any SQLExecutor, id: String, userID: String, name: String, now: Date) async throws {
        try await tx.query(
            """
            INSERT INTO family_profiles (id, user_id, name, avatar, is_default, can_make_purchases, can_use_custom_content_types, created_at_ms, updated_at_ms)
            VALUES (?, ?, ?, NULL, ?, ?, ?, ?, ?)
            """, [id, userID, name, true, true, true, now, now])
    }

    /// Another profile; `input`'s PIN arrives hashed.
    func insert(_ tx: any SQLExecutor, id: String, userID: String, name: String, input: ProfileInput, pinHash: String?, now: Date) async throws {
        try await tx.query(
            """
            INSERT INTO family_profiles (id, user_id, name, avatar, is_default, can_make_purchases, can_use_custom_content_types, pin_hash,
                                         created_at_ms, updated_at_ms, monthly_token_allowance, max_content_rating)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """,
            [
                id, userID, name, input.avatar, false, input.canMakePurchases, input.canUseCustomContentTypes, pinHash, now, now,
                input.monthlyTokenAllowance, input.maxContentRating,
            ])
    }

    /// A change of name, avatar and permissions; the PIN (`pinHash`, or removed), allowance and maximum rating change only
    /// when `input` says so.
    func update(_ tx: any SQLExecutor, id: String, userID: String, name: String, input: ProfileInput, pinHash: String?, now: Date) async throws {
        try await tx.query(
            """
            UPDATE family_profiles SET name = ?, avatar = ?, can_make_purchases = ?, can_use_custom_content_types = ?, updated_at_ms = ?
            WHERE id = ? AND user_id = ?
            """, [name, input.avatar, input.canMakePurchases, input.canUseCustomContentTypes, now, id, userID])
        if pinHash != nil || input.removePin { try await setPIN(tx, id: id, pinHash: pinHash, now: nil) }
        if input.monthlyTokenAllowance != nil || input.removeMonthlyTokenAllowance {
            try await tx.query("UPDATE family_profiles SET monthly_token_allowance = ? WHERE id = ?", [input.monthlyTokenAllowance, id])
        }
        if input.maxContentRating != nil || input.removeMaxContentRating {
            try await tx.query("UPDATE family_profiles SET max_content_rating = ? WHERE id = ?", [input.maxContentRating, id])
        }
    }

    /// A new PIN hash (nil: no PIN); `now` also marks the profile updated.
    func setPIN(_ tx: any SQLExecutor, id: String, pinHash: String?, now: Date?) async throws {
        if let now {
            try await tx.query("UPDATE family_profiles SET pin_hash = ?, updated_at_ms = ? WHERE id = ?", [pinHash, now, id])
        } else {
            try await tx.query("UPDATE family_profiles SET pin_hash = ? WHERE id = ?", [pinHash, id])
        }
    }

    func delete(_ tx: any SQLExecutor, id: String, userID: String) async throws {
        try await tx.query("DELETE FROM family_profiles WHERE id = ? AND user_id = ?", [id, userID])
    }

    /// Every profile of the account (erasure).
    func deleteAll(_ tx: any SQLExecutor, userID: String) async throws {
        try await tx.query("DELETE FROM family_profiles WHERE user_id = ?", [userID])
    }
}
