import Foundation
import Ledger
import Storage
import Synchronization

/// The entitlement snapshot in one statement: the subject's row (`x`, whose `id` is the user) with the subscription
/// (owned here), the ledger's balance and hold figures (``Ledger/snapshotFragment(engine:)``), the bought packs and the
/// active premium catalog (owned here) and the profile (Auth's fragment, through ``AccountDirectory``). Binds: now, whether
/// to read the profile, then the subject's binds.
///
/// Every part is a lookup by the user's id, so its cost does not grow with the tables. Reading it all in one statement
/// is what makes `GET /api/entitlements` cheap (see docs/performance.md); each owner keeps its part of the SQL and a test
/// pins its columns (`LedgerFragmentTests`, `ProfileFragmentTests`, and the snapshot-equals-transactional test here).
enum SnapshotStatement {
    /// The columns the answer is made of (the subject's own columns are not).
    static let columns = [
        "user_id", "plan_id", "status", "current_period_end_ms", "bonus_balance", "subscription_balance", "purchased_balance", "held",
        "expired_holds", "lapsed", "bought", "premium", "profile_id", "profile_name", "profile_can_make_purchases",
        "profile_can_use_custom_content_types", "profile_max_content_rating", "profile_rank",
    ]

    /// Built once per subject query and engine: the subject queries are a few constants (their values are binds), and
    /// building the text cost microseconds per request. Bounded in case a caller builds subject SQL on the fly.
    static func sql(subject: String, engine: Engine, profile: SQLJoinFragment) -> String {
        let key = (engine == .postgres ? "p:" : "s:") + subject
        if let built = built.withLock({ $0[key] }) { return built }
        let sql = build(subject: subject, engine: engine, profile: profile)
        built.withLock { if $0.count < 64 { $0[key] = sql } }
        return sql
    }

    private static let built = Mutex<[String: String]>([:])

    private static func build(subject: String, engine: Engine, profile: SQLJoinFragment) -> String {
        let dialect = SQLDialect(engine: engine)
        let ledger = Ledger.snapshotFragment(engine: engine)
        return """
            SELECT x.*, s.user_id, s.plan_id, s.status, s.current_period_end_ms, \(ledger.select),
              (SELECT \(dialect.joined("pack_id")) FROM pack_unlocks WHERE user_id = x.id) AS bought,
              (SELECT \(dialect.joined("id || ' ' || content_rating || ' ' || included_in_plans")) FROM sticker_packs WHERE is_active AND is_premium)
                AS premium,
              \(profile.select)
            FROM (SELECT CAST(? AS BIGINT) AS now_ms, CAST(? AS BOOLEAN) AS with_profile) n CROSS JOIN (\(subject)) x
            LEFT JOIN subscriptions s ON s.user_id = x.id
            \(ledger.joins)
            \(profile.joins)
            """
    }

    /// The active premium packs in a row of the statement (`id rating plans-json` entries joined by `|`; ids and ratings
    /// hold no spaces).
    static func premium(_ row: SQLRow) throws -> [StickerPack.Premium] {
        try (row.optionalString("premium") ?? "").split(separator: "|").map { entry -> StickerPack.Premium in
            let parts = entry.split(separator: " ", maxSplits: 2)
            let plans = parts.count == 3 ? try JSONDecoder().decode([String].self, from: Data(parts[2].utf8)) : []
            let rating = parts.count >= 2 ? ContentRating(text: String(parts[1])) ?? .age18 : .age18
            return StickerPack.Premium(id: String(parts[0]), includedInPlans: plans, contentRating: rating)
        }
    }
}
