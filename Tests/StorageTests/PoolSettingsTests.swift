import PostgresNIO
import Storage
import Testing

/// The pool settings reach postgres-nio as meant: the server's fixed pool (no idle-timeout timers) without keep-alive
/// queries, a keep-alive when one is asked for, and a tool's pool that opens nothing ahead; a minimum above the maximum
/// is held to it.
@Suite("PostgreSQL pool settings")
struct PoolSettingsTests {
    @Test func settingsReachThePool() throws {
        let url = "postgres://u@127.0.0.1/db"
        let server = try PostgresDatabase.configurations(url: url, pool: .server).pool.options
        #expect(server.minimumConnections == server.maximumConnections && server.maximumConnections == PostgresDatabase.maximumConnections)
        #expect(server.keepAliveBehavior == nil)
        let tool = try PostgresDatabase.configurations(url: url, pool: PostgresPoolSettings(minimumConnections: 0, keepAliveSeconds: 30)).pool.options
        #expect(tool.minimumConnections == 0 && tool.keepAliveBehavior?.frequency == .seconds(30))
        #expect(
            try PostgresDatabase.configurations(url: url, pool: PostgresPoolSettings(minimumConnections: 99)).pool.options.minimumConnections == 20)
    }
}
