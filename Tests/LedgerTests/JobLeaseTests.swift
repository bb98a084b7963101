import Foundation
import Ledger
import Storage
import TestSupport
import Testing

@Suite("Job leases")
struct JobLeaseTests {
    /// A node that shuts down hands its lease back: another node takes it at once instead of after the ttl; a holder
    /// that lost the lease cannot hand back someone else's.
    @Test(arguments: TestDatabase.engines)
    func aReleasedLeaseIsTakenAtOnce(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            _ = try await db.migrate(engine.migrations, logger: TestDatabase.logger)
            let now = Date(timeIntervalSince1970: 1_800_000_000)
            let first = JobLease(name: "sweeper", holder: "node-1", ttlSeconds: 30)
            let second = JobLease(name: "sweeper", holder: "node-2", ttlSeconds: 30)
            func acquire(_ lease: JobLease, _ at: Date) async throws -> Bool {
                try await db.transaction(logger: TestDatabase.logger) { try await lease.acquire($0, now: at) }
            }
            #expect(try await acquire(first, now))
            #expect(!(try await acquire(second, now.addingTimeInterval(1))))
            // node-2 cannot hand back node-1's lease.
            try await db.transaction(logger: TestDatabase.logger) { try await second.release($0) }
            #expect(!(try await acquire(second, now.addingTimeInterval(2))))
            try await db.transaction(logger: TestDatabase.logger) { try await first.release($0) }
            #expect(try await acquire(second, now.addingTimeInterval(3)))
            #expect(!(try await acquire(first, now.addingTimeInterval(4))))
        }
    }
}
