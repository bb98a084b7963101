import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PostgresNIO
import TestSupport
import Testing

@testable import Storage

/// ``PostgresCommitWatch``: an implicit commit is confirmed by the `ReadyForQuery` seen on the wire, a commit that
/// fails after the statement's rows fails the confirmation (and nothing is written) with the watch and without it, and
/// the framing reader finds every message however the bytes are split.
@Suite("PostgreSQL commit watch")
struct CommitWatchTests {
    private func withPools(
        tls: Bool = false, _ body: (PostgresPool, Storage.PostgresDatabase, Storage.PostgresDatabase) async throws -> Void
    ) async throws {
        guard TestDatabase.engines.contains(.postgres) else { return }
        let handle = try await TestDatabase.create(.postgres)
        var configuration = try PostgresDatabase.configuration(url: handle.url)
        if tls {
            // scripts/with-postgres serves TLS with a throwaway self-signed certificate for localhost.
            let ca = try #require(ProcessInfo.processInfo.environment["TEST_POSTGRES_CA"], "run under scripts/with-postgres")
            var settings = TLSConfiguration.makeClientConfiguration()
            settings.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(ca))
            settings.certificateVerification = .noHostnameVerification
            configuration.tls = .require(try NIOSSLContext(configuration: settings))
        }
        let pool = PostgresPool(configuration: configuration, logger: TestDatabase.logger)
        let otherPool = PostgresPool(configuration: configuration, logger: TestDatabase.logger)
        do {
            try await body(
                pool, PostgresDatabase(pool: pool, leaseTimeoutSeconds: TestDatabase.leaseTimeoutSeconds),
                PostgresDatabase(pool: otherPool, leaseTimeoutSeconds: TestDatabase.leaseTimeoutSeconds))
            pool.shutDown()
            otherPool.shutDown()
        } catch {
            pool.shutDown()
            otherPool.shutDown()
            throw error
        }
        try await handle.drop()
    }

    /// Runs `sql` with `id` as the service writes (the statement, then its confirmation) and returns how many requests
    /// expecting a `ReadyForQuery` that sent on the wire.
    private static func requestsToWrite(_ database: Storage.PostgresDatabase, _ sql: String, _ id: Int) async throws -> Int {
        try await database.withConnection(logger: TestDatabase.logger) { tx in
            let executor = try #require(tx as? PostgresExecutor)
            let watch = try #require(executor.pool?.commitWatch(of: executor.connection))
            let before = watch.requests
            _ = try await tx.query(sql, [id])
            try await tx.confirmImplicitCommit()
            return watch.requests - before
        }
    }

    private static func count(_ database: Storage.PostgresDatabase, _ table: String) async throws -> Int64? {
        let rows = try await database.withConnection(logger: TestDatabase.logger) { tx in try await tx.query("SELECT count(*) AS n FROM \(table)") }
        return try rows.first.map { try $0.int("n") }
    }

    /// Over TLS the watch must sit behind the TLS handler (it reads the plain messages): without TLS and with it.
    @Test(arguments: [false, true]) func confirmsOnTheWireAndTheWriteIsVisibleElsewhere(tls: Bool) async throws {
        try await withPools(tls: tls) { pool, database, other in
            _ = try await database.withConnection(logger: TestDatabase.logger) { tx in
                try await tx.query("CREATE TABLE watched (id BIGINT PRIMARY KEY)")
            }
            for id in 1...40 {
                try await pool.withConnection { connection in
                    // Prepared after three runs, as the service's statements are: both paths of postgres-nio.
                    let executor = PostgresExecutor(connection: connection, logger: TestDatabase.logger)
                    _ = try await executor.query("INSERT INTO watched VALUES (?) RETURNING id", [id])
                    let watch = try #require(pool.commitWatch(of: connection))
                    #expect(try await watch.confirm(on: connection.eventLoop))
                }
                #expect(try await Self.count(other, "watched") == Int64(id))
            }
            // The service's path: the statement, then the confirmation, with no statement of its own (a SELECT 1 would
            // be a second request on the wire per write). One more request once, when the statement is prepared.
            var sent = 0
            for id in 100..<110 {
                sent += try await Self.requestsToWrite(database, "INSERT INTO watched VALUES (?) RETURNING id", id)
            }
            // (Up to two more: a confirmation that outwaits the watch's patience on a loaded machine asks once; a
            // statement per write would make it 20.)
            #expect((10...15).contains(sent))
            if tls {
                let encrypted = try await database.withConnection(logger: TestDatabase.logger) { tx in
                    try await tx.query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                }
                #expect(try encrypted.first?.bool("ssl") == true)
            }
        }
    }

    /// Commits that fail after the statement's `CommandComplete`, at the protocol's Sync: a deferred foreign key
    /// (PostgreSQL answers the rows, then an `ErrorResponse` and `ReadyForQuery`), and a backend that ends its session
    /// while committing (the rows, then a FATAL error and the connection closed). The spend's path (statement, then
    /// confirmation) must fail, with the watch and without it, over TLS too, and nothing is written.
    @Test(arguments: [false, true]) func aCommitThatFailsAfterTheRowsIsNeverConfirmed(tls: Bool) async throws {
        try await withPools(tls: tls) { pool, database, other in
            _ = try await database.withConnection(logger: TestDatabase.logger) { tx in
                try await tx.query(
                    "CREATE TABLE deferred (id BIGINT PRIMARY KEY, parent BIGINT REFERENCES deferred (id) DEFERRABLE INITIALLY DEFERRED)")
                try await tx.query(
                    """
                    CREATE FUNCTION end_session() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN IF NEW.id < 0 THEN PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(1); END IF; RETURN NULL; END $$
                    """)
                try await tx.query(
                    """
                    CREATE CONSTRAINT TRIGGER end_session AFTER INSERT ON deferred DEFERRABLE INITIALLY DEFERRED
                        FOR EACH ROW EXECUTE FUNCTION end_session()
                    """)
            }
            var written: Int64 = 0
            for round in 0..<8 {
                let (watched, ends) = (round % 2 == 0, round % 4 >= 2)
                let error = await #expect(throws: (any Error).self) {
                    try await pool.withConnection { connection in
                        let executor = PostgresExecutor(connection: connection, logger: TestDatabase.logger, pool: watched ? pool : nil)
                        let row = ends ? "(?, NULL)" : "(?, 999)"
                        _ = try await executor.query("INSERT INTO deferred VALUES \(row) RETURNING id", [ends ? -round - 1 : round + 1])
                        try await executor.confirmImplicitCommit()
                    }
                }
                // The watch reports the failed commit, or the connection closed over it: never success.
                if watched { #expect(error is StorageError) }
                #expect(try await Self.count(other, "deferred") == written)
                // The pool serves the next caller.
                try await database.withConnection(logger: TestDatabase.logger) { tx in
                    _ = try await tx.query("INSERT INTO deferred VALUES (?, NULL) RETURNING id", [100 + round])
                    try await tx.confirmImplicitCommit()
                }
                written += 1
            }
            #expect(try await Self.count(other, "deferred") == 8)
        }
    }

    /// A write inside a transaction block left open on the connection has not committed: never confirmed, with the
    /// watch (its `ReadyForQuery` says "in a transaction") or without it (the write's transaction id is still there).
    @Test func aWriteInsideATransactionLeftOpenIsNeverConfirmed() async throws {
        try await withPools { pool, database, other in
            _ = try await database.withConnection(logger: TestDatabase.logger) { tx in
                try await tx.query("CREATE TABLE open_block (id BIGINT PRIMARY KEY)")
            }
            for watched in [true, false] {
                await #expect(throws: StorageError.self) {
                    try await pool.withConnection { connection in
                        let executor = PostgresExecutor(connection: connection, logger: TestDatabase.logger, pool: watched ? pool : nil)
                        try await executor.query("BEGIN")
                        _ = try await executor.query("INSERT INTO open_block VALUES (?) RETURNING id", [watched ? 1 : 2])
                        try await executor.confirmImplicitCommit()
                    }
                }
                if watched {
                    // The pool closed that connection rather than hand on its open transaction (its backend ends soon).
                    var open: Int64? = nil
                    for _ in 0..<150 where open != 0 {
                        let rows = try await other.withConnection(logger: TestDatabase.logger) { tx in
                            try await tx.query(
                                "SELECT count(*) AS n FROM pg_stat_activity WHERE state LIKE 'idle in transaction%' AND datname = current_database()")
                        }
                        open = try rows.first?.int("n")
                        if open != 0 { try await Task.sleep(for: .milliseconds(100)) }
                    }
                    #expect(open == 0)
                }
            }
            #expect(try await Self.count(other, "open_block") == 0)
        }
    }

    /// A commit that takes its time (a deferred trigger sleeping 0.3 s): the confirmation comes only after it, and the
    /// row is there for every other connection at once.
    @Test func aSlowCommitIsConfirmedOnlyOnceItIsDone() async throws {
        try await withPools { _, database, other in
            _ = try await database.withConnection(logger: TestDatabase.logger) { tx in
                try await tx.query("CREATE TABLE slow (id BIGINT PRIMARY KEY)")
                try await tx.query(
                    "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.3); RETURN NULL; END $$")
                try await tx.query(
                    "CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON slow DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()"
                )
            }
            var sent = 0
            for id in 1...4 {
                let started = ContinuousClock.now
                sent += try await Self.requestsToWrite(database, "INSERT INTO slow VALUES (?) RETURNING id", id)
                #expect(ContinuousClock.now - started >= .milliseconds(300))
                #expect(try await Self.count(other, "slow") == Int64(id))
            }
            // Confirmed by the watch: no statement of its own (one more request once, when the insert is prepared).
            #expect((4...7).contains(sent))  // one more for a loaded machine; a statement per write would make it 8 or 9
        }
    }

    /// A host that refuses the connection is an outage (503, and a reason to look for the primary again), as
    /// postgres-nio's own connect reports it: not an unknown error (a 500; `scripts/operations-test failover` found it).
    @Test func aRefusedConnectionIsUnavailable() async throws {
        let refused = try PostgresDatabase.configuration(url: "postgres://postgres@127.0.0.1:1/accounts")
        await #expect {
            _ = try await PostgresCommitWatch.connect(
                on: MultiThreadedEventLoopGroup.singleton.any(), configuration: refused, id: 1, logger: TestDatabase.logger)
        } throws: { error in
            if case .unavailable = error as? StorageError { return true }
            return false
        }
    }

    @Test func framingFindsEveryMessageHoweverTheBytesAreSplit() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<300 {
            var types: [UInt8] = []
            var firsts: [UInt8?] = []
            var stream = ByteBuffer()
            for _ in 0..<Int.random(in: 1...30, using: &generator) {
                let type = UInt8.random(in: 0x41...0x5a, using: &generator)
                let payload = Int.random(in: 0...(Bool.random(using: &generator) ? 20 : 9_000), using: &generator)
                let filler = UInt8.random(in: 0...255, using: &generator)
                types.append(type)
                firsts.append(payload > 0 ? filler : nil)
                stream.writeInteger(type)
                stream.writeInteger(UInt32(payload + 4))
                stream.writeRepeatingByte(filler, count: payload)
            }
            // The first body byte of one type comes with it (a ReadyForQuery's status).
            let peek = types.randomElement(using: &generator)
            var framing = PostgresFraming(peek: peek)
            var seen: [UInt8] = []
            var peeked: [UInt8?] = []
            while stream.readableBytes > 0 {
                let length = min(stream.readableBytes, Int.random(in: 1...700, using: &generator))
                let chunk = stream.getSlice(at: stream.readerIndex, length: length) ?? ByteBuffer()
                stream.moveReaderIndex(forwardBy: length)
                let whole = framing.feed(chunk) { type, first in
                    seen.append(type)
                    peeked.append(first)
                    return true
                }
                #expect(whole)
            }
            #expect(seen == types)
            #expect(peeked == zip(types, firsts).map { $0 == peek ? $1 : nil })
        }
        // Lengths no message has: shorter than the length field, or past PostgreSQL's 1 GiB.
        for length in [UInt32(3), UInt32(0), (UInt32(1) << 30) + 1, UInt32.max] {
            var broken = PostgresFraming()
            var header = ByteBuffer()
            header.writeInteger(UInt8(ascii: "D"))
            header.writeInteger(length)
            #expect(!broken.feed(header) { _, _ in true })
        }
    }
}
