import Clock
import Foundation
import Ledger
import Logging
import Storage

/// One allowance period: what a profile's `monthlyTokenAllowance` caps.
public struct AllowancePeriod: Sendable, Equatable {
    public let start: Date
    public let end: Date
}

/// A profile's usage in the current allowance period, as `GET /api/family-profiles/{id}/usage` shows it.
public struct ProfileUsageView: Sendable, Equatable {
    public let profileID: String
    public let period: AllowancePeriod
    public let allowance: Int64?
    public let usage: ProfileUsage
    /// What the profile may still use this period (nil: no cap).
    public var remaining: Int64? { allowance.map(usage.remaining(under:)) }
}

/// The allowance rules that depend on the subscription, in one place (the counting is the ledger's, `ProfileUsage.swift`).
///
/// **The period**: while a subscription entitles the user, the month of its period that contains now (a monthly plan's
/// period; month k of a yearly one, the month the drip grants tokens for), so usage starts again when the tokens do;
/// otherwise the calendar month in UTC. A hold counts in the period it was made in, and settles there.
extension SubscriptionStore {
    public func allowancePeriod(userID: String, now: Date, _ tx: any SQLExecutor) async throws -> AllowancePeriod {
        Self.allowancePeriod(try await subscription(userID: userID, tx), now: now)
    }

    static func allowancePeriod(_ subscription: Subscription?, now: Date) -> AllowancePeriod {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC") ?? calendar.timeZone
        if let subscription, subscription.isEntitled(at: now) {
            let start = subscription.currentPeriodStart
            let month = max(0, calendar.dateComponents([.month], from: start, to: now).month ?? 0)
            let from = calendar.date(byAdding: .month, value: month, to: start) ?? start
            let to = calendar.date(byAdding: .month, value: month + 1, to: start) ?? subscription.currentPeriodEnd
            return AllowancePeriod(start: from, end: min(to, subscription.currentPeriodEnd))
        }
        let first = calendar.date(from: calendar.dateComponents([.year, .month], from: now)) ?? now
        return AllowancePeriod(start: first, end: calendar.date(byAdding: .month, value: 1, to: first) ?? now)
    }

    /// The plan and the allowance period at `now`, from one read of the subscription (so a change committed between two
    /// reads can never give a plan of one subscription and the period of another).
    func planAndPeriod(userID: String, now: Date, _ tx: any SQLExecutor) async throws -> (SubscriptionPlan, AllowancePeriod) {
        let subscription = try await subscription(userID: userID, tx)
        return (plan(of: subscription, now: now), Self.allowancePeriod(subscription, now: now))
    }
}

extension Attribution {
    /// What a charge made for `profile` in `period` counts on: its allowance.
    init(_ profile: ProfileAccess, period: AllowancePeriod) {
        self.init(profileID: profile.permissions.id, periodStart: period.start, allowance: profile.monthlyTokenAllowance)
    }
}

extension EntitlementService {
    /// What the profile may still use in `period` (nil: no cap, or no such profile). A read: expired holds not yet
    /// released still count until the next write releases them.
    func remainingAllowance(_ tx: any SQLExecutor, userID: String, profileID: String, period: AllowancePeriod) async throws -> Int64? {
        guard let access = try await accounts.profile(userID: userID, profileID: profileID, tx), let cap = access.monthlyTokenAllowance else {
            return nil
        }
        let usage = try await ledger.usage(tx, profileID: profileID, periodStart: period.start)
        return usage.remaining(under: cap)
    }

    /// The profile's allowance, usage and what remains this period; `profileNotFound` for a profile not of this account.
    /// The user's expired holds are released first (as a balance read does), so their tokens are back in the allowance.
    public func profileUsage(userID: String, profileID: String, logger: Logger) async throws -> ProfileUsageView {
        try await database.transaction(lane: Ledger.lane(userID: userID), logger: logger) { tx in
            guard let profile = try await accounts.profile(userID: userID, profileID: profileID, tx) else { throw EntitlementError.profileNotFound }
            _ = try await ledger.balances(tx, userID: userID)
            let period = try await subscriptions.allowancePeriod(userID: userID, now: clock.now(), tx)
            return ProfileUsageView(
                profileID: profileID, period: period, allowance: profile.monthlyTokenAllowance,
                usage: try await ledger.usage(tx, profileID: profileID, periodStart: period.start))
        }
    }
}
