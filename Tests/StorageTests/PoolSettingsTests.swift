import PostgresNIO
import Storage
import Testing

/// The pool settings reach postgres-nio as meant: the server's pool without keep-alive queries, a fixed pool and a
/// keep-alive when asked for; a minimum above the maximum is held to it.
@Suite("PostgreSQL pool settings")
struct PoolSettingsTests {
    @Test func settingsReachThePool() throws {
        let url = "postgres://u@127.0.0.1/db"
        let server = try PostgresDatabase.configurations(url: url, pool: .server).pool.options
        #expect(server.minimumConnections == 0 && server.keepAliveBehavior == nil)
        let fixed = try PostgresDatabase.configurations(url: url, pool: PostgresPoolSettings(minimumConnections: 20, keepAliveSeconds: 30)).pool
            .options
        #expect(fixed.minimumConnections == fixed.maximumConnections && fixed.keepAliveBehavior?.frequency == .seconds(30))
        #expect(
            try PostgresDatabase.configurations(url: url, pool: PostgresPoolSettings(minimumConnections: 99)).pool.options.minimumConnections == 20)
    }
}
