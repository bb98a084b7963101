import Foundation
import Storage

/// Whom a hold or a spend is for: a family profile, the allowance period it counts in, and the cap of that period
/// (nil: counted, not capped).
public struct Attribution: Sendable, Equatable {
    public let profileID: String
    public let periodStart: Date
    public let allowance: Int64?

    public init(profileID: String, periodStart: Date, allowance: Int64?) {
        (self.profileID, self.periodStart, self.allowance) = (profileID, periodStart, allowance)
    }
}

/// What a profile has used (captured holds and spends) and holds (pending holds) in one allowance period.
public struct ProfileUsage: Sendable, Equatable, Codable {
    public let used: Int64
    public let held: Int64

    /// What may still be used under `cap` (never below zero: a lowered cap can be passed already).
    public func remaining(under cap: Int64) -> Int64 { max(0, cap - used - held) }
}

/// The allowance rules, in one place. A profile's usage row per period (`ledger_profile_usage`) is changed only under
/// the user's account locks (taken first by every ledger write, so the lock order is always accounts, then usage): a
/// hold adds to `held` and a spend to `used` in one conditional update that refuses to pass the cap, so parallel
/// requests of one profile can never pass it; a capture moves the hold from `held` to `used` (what was captured) and
/// a void, an expiry or an erasure gives it back. A hold remembers its profile and period, so it settles on the period
/// it was counted in.
extension Ledger {
    /// Counts `held` and `used` tokens on the attribution's row; `allowanceExceeded` (nothing counted) when the row
    /// would pass the cap.
    func charge(_ tx: any SQLExecutor, _ attribution: Attribution, userID: String, held: Int64, used: Int64) async throws {
        let period = attribution.periodStart.epochMilliseconds
        // One upsert: a new row counts the charge (refused in Swift first when the charge alone passes the cap); an
        // existing row adds it only while the total stays within the cap.
        var sql = """
            INSERT INTO ledger_profile_usage (profile_id, period_start_ms, user_id, used, held) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT (profile_id, period_start_ms) DO UPDATE SET held = ledger_profile_usage.held + excluded.held,
                used = ledger_profile_usage.used + excluded.used
            """
        var binds: [any SQLBindable] = [attribution.profileID, period, userID, used, held]
        if let cap = attribution.allowance {
            sql += " WHERE ledger_profile_usage.used + ledger_profile_usage.held + ? <= ?"
            binds += [held + used, cap]
        }
        if held + used <= (attribution.allowance ?? .max), try await !tx.query(sql + " RETURNING used", binds).isEmpty { return }
        let usage = try await usage(tx, profileID: attribution.profileID, periodStart: attribution.periodStart)
        let cap = attribution.allowance ?? 0
        throw LedgerError.allowanceExceeded(allowance: cap, remaining: usage.remaining(under: cap))
    }

    /// A hold resolved: its amount leaves `held`, and `captured` of it joins `used`. `row` is the hold's row after the
    /// resolution (columns `profile_id`, `usage_period_ms`, `amount`); nothing to do for a hold no profile made.
    func settleUsage(_ tx: any SQLExecutor, hold row: SQLRow?, captured: Int64) async throws {
        guard let row, let profileID = row.optionalString("profile_id"), let period = row.optionalInt("usage_period_ms") else { return }
        try await tx.query(
            "UPDATE ledger_profile_usage SET held = held - ?, used = used + ? WHERE profile_id = ? AND period_start_ms = ?",
            [try row.int("amount"), captured, profileID, period])
    }

    /// A spend made for a profile (counted by ``charge(_:_:userID:held:used:)`` first), recorded for `ledger verify`.
    func recordSpend(_ tx: any SQLExecutor, _ attribution: Attribution, userID: String, operationID: String, amount: Int64, now: Date) async throws {
        try await tx.query(
            "INSERT INTO ledger_profile_spends (operation_id, profile_id, period_start_ms, user_id, amount, created_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
            [operationID, attribution.profileID, attribution.periodStart, userID, amount, now])
    }

    /// The profile's usage in the period starting at `periodStart` (zero when nothing was counted yet).
    public func usage(_ tx: any SQLExecutor, profileID: String, periodStart: Date) async throws -> ProfileUsage {
        let row = try await tx.first(
            "SELECT used, held FROM ledger_profile_usage WHERE profile_id = ? AND period_start_ms = ?", [profileID, periodStart])
        return ProfileUsage(used: row?.optionalInt("used") ?? 0, held: row?.optionalInt("held") ?? 0)
    }
}
