import Auth
import Clock
import Foundation
import Storage
import TestSupport
import Testing

/// Auth's exported SQL, run inside other modules' statements: the snapshot's profile part, the session lookups and the
/// API-key lookup of the one-statement spend. Each is pinned to its column contract here.
@Suite("Auth fragments")
struct AuthFragmentTests {
    static func migrated(_ engine: Engine, _ body: @Sendable @escaping (any Database) async throws -> Void) async throws {
        try await TestDatabase.with(engine) { db, _ in
            _ = try await db.migrate(engine.migrations, logger: TestDatabase.logger)
            try await db.transaction(logger: TestDatabase.logger) { tx in
                try await tx.query(
                    """
                    INSERT INTO users (id, email, name, email_verified, role, prompt_enhancement_enabled, created_at_ms, updated_at_ms)
                    VALUES ('u', 'u@x.com', 'U', ?, 'user', ?, 0, 0)
                    """, [true, true])
                // The default profile is the newest, and two kids share a creation time: the order is default first, then
                // by creation time, then by id.
                for (id, isDefault, createdAt) in [("d", true, 9), ("kb", false, 5), ("ka", false, 5), ("k", false, 1)] {
                    try await tx.query(
                        """
                        INSERT INTO family_profiles (id, user_id, name, is_default, can_make_purchases, can_use_custom_content_types, created_at_ms, updated_at_ms)
                        VALUES (?, 'u', ?, ?, ?, ?, ?, 0)
                        """, [id, id == "d" ? "Parent" : "Kid " + id, isDefault, isDefault, true, createdAt])
                }
            }
            try await body(db)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func profileFragmentYieldsTheSelectedOrDefaultProfileAndItsRank(engine: Engine) async throws {
        try await Self.migrated(engine) { (db: any Database) async throws in
            let fragment = ProfileService.snapshotFragment(engine: engine)
            #expect(
                fragment.columns == [
                    "profile_id", "profile_name", "profile_can_make_purchases", "profile_can_use_custom_content_types",
                    "profile_max_content_rating", "profile_rank",
                ])
            let sql = """
                SELECT \(fragment.select) FROM (SELECT CAST(? AS BOOLEAN) AS with_profile) n
                CROSS JOIN (SELECT CAST(? AS TEXT) AS id, CAST(? AS TEXT) AS selected_profile_id) x \(fragment.joins)
                """
            // A gone selection yields no profile (never the owner's); ranks follow the account's order (d, k, ka, kb).
            let cases: [(Bool, String?, String?, Int)] = [
                (true, "k", "k", 1), (true, "ka", "ka", 2), (true, "kb", "kb", 3), (true, "d", "d", 0), (true, nil, "d", 0), (true, "gone", nil, 0),
                (false, "k", nil, 0),
            ]
            for (withProfile, selected, expected, rank) in cases {
                let row = try #require(
                    try await db.withConnection(logger: TestDatabase.logger) { try await $0.first(sql, [withProfile, "u", selected]) })
                #expect(Set(row.columns.names) == Set(fragment.columns))
                #expect(row.optionalString("profile_id") == expected, "\(withProfile) \(selected ?? "none")")
                #expect(try row.int("profile_rank") == Int64(rank), "\(withProfile) \(selected ?? "none")")
            }
            #expect(try await db.withConnection(logger: TestDatabase.logger) { try await ProfileService.count(userID: "u", $0) } == 4)
        }
    }

    @Test(arguments: TestDatabase.engines)
    func sessionAndAPIKeyQueriesKeepTheirColumns(engine: Engine) async throws {
        try await Self.migrated(engine) { (db: any Database) async throws in
            let checked = try await db.withConnection(logger: TestDatabase.logger) { try await $0.query(AuthService.checkedSessionQuery, ["none"]) }
            #expect(checked.isEmpty)
            #expect(try await db.withConnection(logger: TestDatabase.logger) { try await AuthService.isActiveUser("u", $0) })
            #expect(try await db.withConnection(logger: TestDatabase.logger) { try await AuthService.isActiveUser("nobody", $0) } == false)
            guard engine == .postgres else { return }  // the key lookup is PostgreSQL's (the one-statement spend)
            let keys = APIKeyService(database: db, clock: SystemTimeSource())
            let (_, secret) = try await keys.create(name: "k", scopes: ["ledger:write"], logger: TestDatabase.logger)
            let query = try #require(APIKeyService.scopedKeyQuery(secret: secret, scope: "ledger:write", callerPrefix: "key:", now: Date()))
            let row = try #require(try await db.withConnection(logger: TestDatabase.logger) { try await $0.first(query.sql, query.binds) })
            #expect(Set(row.columns.names) == ["caller", "caller_id", "caller_seen_at_ms"])
            #expect(try row.string("caller").hasPrefix("key:"))
            let other = try #require(APIKeyService.scopedKeyQuery(secret: secret, scope: "admin", callerPrefix: "key:", now: Date()))
            #expect(
                try await db.withConnection(logger: TestDatabase.logger) { try await $0.first(other.sql, other.binds) } == nil,
                "a missing scope finds no row")
        }
    }
}
