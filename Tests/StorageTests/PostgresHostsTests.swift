import Foundation
import Logging
import PostgresNIO
import TestSupport
import Testing

@testable import Storage

/// Several hosts in DATABASE_URL (libpq's multi-host form): the service starts on, and after a failure moves to, the
/// host that is a writable primary; a read-only server answers `unavailable` (503), never a 500.
@Suite("PostgreSQL hosts")
struct PostgresHostsTests {
    @Test func multiHostURLsAreReadAsLibpqWritesThem() throws {
        let hosts = try PostgresDatabase.hostConfigurations(
            url: "postgres://app:s%40cret@db1:5432,db2:6543,10.0.0.3/accounts?sslmode=disable&target_session_attrs=read-write")
        #expect(hosts.map(\.name) == ["db1:5432", "db2:6543", "10.0.0.3"])
        #expect(hosts.map(\.connection.host) == ["db1", "db2", "10.0.0.3"])
        #expect(hosts.map(\.connection.port) == [5432, 6543, 5432])
        #expect(hosts.allSatisfy { $0.connection.username == "app" && $0.connection.password == "s@cret" && $0.connection.database == "accounts" })
        #expect(try PostgresDatabase.hostConfigurations(url: "postgres://u@one/db?target_session_attrs=any").count == 1)
        // A password is decoded once (`%25` is a percent sign); IPv6 literals lose their brackets.
        let v6 = try PostgresDatabase.hostConfigurations(url: "postgres://app:100%25%40x@[::1]:5433,[fd00::2]/accounts")
        #expect(v6.map(\.connection.host) == ["::1", "fd00::2"] && v6.map(\.connection.port) == [5433, 5432])
        #expect(v6.allSatisfy { $0.connection.password == "100%@x" })
        // libpq's connect_timeout, in whole seconds; 3 s without it.
        #expect(try PostgresDatabase.configuration(url: "postgres://u@db1/db?connect_timeout=20").options.connectTimeout == .seconds(20))
        #expect(try PostgresDatabase.configuration(url: "postgres://u@db1/db").options.connectTimeout == .seconds(3))
        for bad in [
            "postgres://u@db1,db2/db?target_session_attrs=any", "postgres://u@db1,,db2/db", "postgres://u@/db",
            "postgres://u@" + Array(repeating: "h", count: 9).joined(separator: ",") + "/db", "postgres://u@db1,db2/db?target_session_attrs=standby",
            "mysql://u@db1/db", "postgres://u@db1/db?connect_timeout=0", "postgres://u@db1/db?connect_timeout=2.5",
        ] {
            #expect(throws: StorageError.self, "\(bad)") { try PostgresDatabase.hostConfigurations(url: bad) }
        }
    }

    @Test func startsOnTheHostThatAnswersAsPrimary() async throws {
        guard TestDatabase.engines.contains(.postgres) else { return }
        let handle = try await TestDatabase.create(.postgres)
        defer { Task { try? await handle.drop() } }
        // The first host refuses connections (nothing listens on port 1): the second one takes the requests.
        let url =
            handle.url.replacing(/@([^\/]+)\//) { "@127.0.0.1:1,\($0.output.1)/" } + (handle.url.contains("?") ? "&" : "?")
            + "target_session_attrs=read-write"
        let (database, hosts) = try await DatabaseLocation.postgres(url: url).open(leaseTimeoutSeconds: 5, logger: TestDatabase.logger)
        let pools = try #require(hosts)
        let running = Task { await pools.run() }
        defer { running.cancel() }
        // A probe gives each host 3 s; a machine running the whole suite at once can miss that, so up to three probes.
        for _ in 0..<3 where !(await pools.locate()) {}
        #expect(try await database.migrate(Engine.postgres.migrations, logger: TestDatabase.logger).count > 0)
        #expect(pools.current.name != "127.0.0.1:1")
        let one = try await database.transaction(logger: TestDatabase.logger) { try await $0.query("SELECT 1 AS one") }
        #expect(try one.first?.int("one") == 1)
        try await database.close()
    }

    @Test func aReadOnlyServerAnswersUnavailable() async throws {
        guard TestDatabase.engines.contains(.postgres) else { return }
        try await TestDatabase.with(.postgres) { pooled, handle in
            _ = try await pooled.transaction(logger: TestDatabase.logger) { try await $0.query("CREATE TABLE t (n INT)") }
            let name = try #require(handle.url.split(separator: "?")[0].split(separator: "/").last.map(String.init))
            _ = try await pooled.withConnection(logger: TestDatabase.logger) {
                try await $0.query("ALTER DATABASE \(name) SET default_transaction_read_only = on")
            }
            // New connections see the setting (as on a standby, or a demoted primary).
            let (database, hosts) = try await DatabaseLocation.postgres(url: handle.url).open(leaseTimeoutSeconds: 5, logger: TestDatabase.logger)
            let pools = try #require(hosts)
            let running = Task { await pools.run() }
            defer { running.cancel() }
            await #expect {
                try await database.transaction(logger: TestDatabase.logger) { try await $0.query("INSERT INTO t VALUES (1)") }
            } throws: { error in
                guard case StorageError.unavailable = error else { return false }
                return true
            }
            try await database.close()
        }
    }
}
