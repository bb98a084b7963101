import Foundation
import Storage

/// How one kind of attempt is limited: at most `limit` attempts per window, optional waits between attempts, and an
/// optional lock once the limit is reached.
public struct AttemptRule: Sendable, Equatable {
    public enum Window: Sendable, Equatable {
        /// The count starts again `seconds` after the window's first attempt (a rate: `limit` per window).
        case fixed(seconds: Double)
        /// The count starts again after `seconds` without an attempt (consecutive attempts).
        case idle(seconds: Double)

        var seconds: Double {
            switch self {
            case .fixed(let seconds), .idle(let seconds): seconds
            }
        }
    }

    public var limit: Int
    public var window: Window
    /// Reserving the `limit`-th attempt locks the budget this long; 0 means it just refuses until the window ends.
    public var lockSeconds: Double
    /// Seconds to wait after the n-th attempt of a window before the next one (`delays[n]`, else `delayDefault`).
    public var delays: [Int: Double]
    public var delayDefault: Double

    public init(limit: Int, window: Window, lockSeconds: Double = 0, delays: [Int: Double] = [:], delayDefault: Double = 0) {
        precondition(limit >= 1, "a budget allows at least one attempt")
        self.limit = limit
        self.window = window
        self.lockSeconds = lockSeconds
        self.delays = delays
        self.delayDefault = delayDefault
    }

    func delaySeconds(afterAttempts attempts: Int) -> Double { delays[attempts] ?? delayDefault }
}

/// The outcome of asking a budget for one attempt.
public enum AttemptReservation: Sendable, Equatable {
    /// The attempt may go ahead; it is the `attempt`-th of the window (1-based) and is already counted.
    case reserved(attempt: Int)
    /// Refused without counting: a lock is in force (`locked`), or a wait or the window's end is due.
    case refused(retryAfterSeconds: Int, locked: Bool)
}

/// Attempt budgets kept in `attempt_budgets`, one row per key, shared by every node.
///
/// An attempt is reserved with one atomic statement whose `WHERE` refuses at the limit, before any slow work (Argon2, a
/// mail): parallel requests cannot take more than `limit` slots, because each waits for the previous writer of the row and
/// re-evaluates the condition on its result (PostgreSQL at READ COMMITTED; SQLite has one writer at a time). Failures write
/// nothing afterwards, so a late failure can never lower a count or lift a lock. Call it in a transaction of its own (or
/// one that commits before the slow work): the row stays locked until that commit.
public enum AttemptBudget {
    /// Reserves one attempt for `key` under `rule` at `now`.
    public static func reserve(_ tx: any SQLExecutor, key: String, rule: AttemptRule, now: Date) async throws -> AttemptReservation {
        let lockUntil: Date? = rule.lockSeconds > 0 ? now.addingTimeInterval(rule.lockSeconds) : nil
        let restarts = restartCondition(rule)
        let restartBinds: [any SQLBindable] = [now, now.addingTimeInterval(-rule.window.seconds)]
        let next = "CASE WHEN \(restarts) THEN 1 ELSE b.attempts + 1 END"
        let sql = """
            INSERT INTO attempt_budgets AS b (budget_key, attempts, window_started_at_ms, last_attempt_at_ms, locked_until_ms)
            VALUES (?, 1, ?, ?, CAST(? AS BIGINT))
            ON CONFLICT (budget_key) DO UPDATE SET
                attempts = \(next),
                window_started_at_ms = CASE WHEN \(restarts) THEN excluded.window_started_at_ms ELSE b.window_started_at_ms END,
                last_attempt_at_ms = CASE WHEN excluded.last_attempt_at_ms > b.last_attempt_at_ms THEN excluded.last_attempt_at_ms
                                          ELSE b.last_attempt_at_ms END,
                locked_until_ms = CASE WHEN \(next) >= ? THEN CAST(? AS BIGINT) ELSE NULL END
            WHERE \(restarts) OR (b.attempts < ? AND b.locked_until_ms IS NULL AND \(waitedCondition(rule)))
            RETURNING attempts
            """
        var binds: [any SQLBindable] = [key, now, now, rule.limit <= 1 ? lockUntil : nil]
        binds += restartBinds + restartBinds + restartBinds + [rule.limit, lockUntil]
        binds += restartBinds + [rule.limit, now]
        if let row = try await tx.first(sql, binds) { return .reserved(attempt: Int(try row.int("attempts"))) }
        return try await refusal(tx, key: key, rule: rule, now: now)
    }

    /// The attempt succeeded: the budget starts again, unless a lock set by a later attempt is in force (then only the
    /// attempt that set it, the last one the lock let through, may clear it).
    public static func succeeded(_ tx: any SQLExecutor, key: String, attempt: Int, now: Date) async throws {
        try await tx.query(
            "DELETE FROM attempt_budgets WHERE budget_key = ? AND (locked_until_ms IS NULL OR locked_until_ms <= ? OR attempts = ?)",
            [key, now, attempt])
    }

    /// Gives one attempt back when what it guarded turned out not to count (a successful sign-in against a per-network
    /// failure budget). Never while a lock is in force.
    public static func refund(_ tx: any SQLExecutor, key: String) async throws {
        try await tx.query(
            "UPDATE attempt_budgets SET attempts = attempts - 1 WHERE budget_key = ? AND attempts > 0 AND locked_until_ms IS NULL", [key])
    }

    /// Forgets the budget (a password reset lifts a sign-in lock; a new code gets fresh attempts).
    public static func clear(_ tx: any SQLExecutor, key: String) async throws {
        try await tx.query("DELETE FROM attempt_budgets WHERE budget_key = ?", [key])
    }

    /// Deletes budgets idle since before `cutoff` whose locks have ended (at most `limit` rows); returns how many. The
    /// deleting statement checks both again on the row it deletes, so an attempt reserved meanwhile keeps its budget.
    public static func purge(_ tx: any SQLExecutor, idleBefore cutoff: Date, now: Date, limit: Int) async throws -> Int {
        let idle = "last_attempt_at_ms < ? AND (locked_until_ms IS NULL OR locked_until_ms < ?)"
        return try await tx.query(
            """
            DELETE FROM attempt_budgets WHERE budget_key IN (SELECT budget_key FROM attempt_budgets WHERE \(idle) LIMIT ?) AND \(idle)
            RETURNING budget_key
            """, [cutoff, now, max(1, limit), cutoff, now]
        ).count
    }

    // MARK: - Internals

    /// True when the stored window is over (binds: now, now − window): a lock that ended, or an unlocked window that ended.
    static func restartCondition(_ rule: AttemptRule) -> String {
        let reference = if case .fixed = rule.window { "b.window_started_at_ms" } else { "b.last_attempt_at_ms" }
        return "((b.locked_until_ms IS NOT NULL AND b.locked_until_ms <= ?) OR (b.locked_until_ms IS NULL AND \(reference) <= ?))"
    }

    /// True when the wait after the stored number of attempts is over (bind: now). Delays are integer literals from the
    /// rule, not input. Without a delay there is nothing to compare: concurrent requests take `now` before they queue for
    /// the row, so an earlier `now` may arrive after a later one, and must not be refused for it.
    static func waitedCondition(_ rule: AttemptRule) -> String {
        let defaultMs = Int64(rule.delayDefault * 1000)
        let cases = rule.delays.sorted { $0.key < $1.key }.map { "WHEN \($0.key) THEN \(Int64($0.value * 1000))" }.joined(separator: " ")
        let delay = cases.isEmpty ? String(defaultMs) : "(CASE b.attempts \(cases) ELSE \(defaultMs) END)"
        guard !cases.isEmpty || defaultMs > 0 else { return "(? IS NOT NULL)" }
        return "(\(delay) = 0 OR b.last_attempt_at_ms + \(delay) <= ?)"
    }

    static func refusal(_ tx: any SQLExecutor, key: String, rule: AttemptRule, now: Date) async throws -> AttemptReservation {
        guard let row = try await tx.first("SELECT * FROM attempt_budgets WHERE budget_key = ?", [key]) else {
            return .refused(retryAfterSeconds: 1, locked: false)
        }
        let state = try State(row: row)
        let until: Date
        var locked = false
        if let lockedUntil = state.lockedUntil, lockedUntil > now {
            (until, locked) = (lockedUntil, true)
        } else if state.attempts >= rule.limit {
            until = state.windowReference(rule).addingTimeInterval(rule.window.seconds)
        } else {
            until = state.lastAttemptAt.addingTimeInterval(rule.delaySeconds(afterAttempts: state.attempts))
        }
        return .refused(retryAfterSeconds: max(1, Int(until.timeIntervalSince(now).rounded(.up))), locked: locked)
    }

    struct State {
        let attempts: Int
        let windowStartedAt: Date
        let lastAttemptAt: Date
        let lockedUntil: Date?

        init(row: SQLRow) throws {
            attempts = Int(try row.int("attempts"))
            windowStartedAt = try row.date("window_started_at_ms")
            lastAttemptAt = try row.date("last_attempt_at_ms")
            lockedUntil = row.optionalDate("locked_until_ms")
        }

        func windowReference(_ rule: AttemptRule) -> Date {
            if case .fixed = rule.window { windowStartedAt } else { lastAttemptAt }
        }

        func restarts(_ rule: AttemptRule, now: Date) -> Bool {
            if let lockedUntil { return lockedUntil <= now }
            return windowReference(rule) <= now.addingTimeInterval(-rule.window.seconds)
        }
    }
}

extension AttemptBudget {
    /// Attempts left now, and the refusal the next ``reserve(_:key:rule:now:)`` would answer (nil: it would reserve).
    /// Nothing is written.
    public static func peek(
        _ tx: any SQLExecutor, key: String, rule: AttemptRule, now: Date
    ) async throws -> (remaining: Int, refusal: AttemptReservation?) {
        guard let row = try await tx.first("SELECT * FROM attempt_budgets WHERE budget_key = ?", [key]) else { return (rule.limit, nil) }
        let state = try State(row: row)
        if state.restarts(rule, now: now) { return (rule.limit, nil) }
        let waitUntil = state.lastAttemptAt.addingTimeInterval(rule.delaySeconds(afterAttempts: state.attempts))
        let blocked = state.lockedUntil != nil || state.attempts >= rule.limit || waitUntil > now
        return (max(0, rule.limit - state.attempts), blocked ? try await refusal(tx, key: key, rule: rule, now: now) : nil)
    }
}
