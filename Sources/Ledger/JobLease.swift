import Foundation
import Storage

/// A database lease so that one node at a time runs a background job (`job_leases`).
public struct JobLease: Sendable {
    public let name: String
    public let holder: String
    public let ttlSeconds: Double

    public init(name: String, holder: String, ttlSeconds: Double) {
        self.name = name
        self.holder = holder
        self.ttlSeconds = ttlSeconds
    }

    /// Takes or renews the lease; true when this holder has it until now + ttl.
    public func acquire(_ tx: any SQLExecutor, now: Date) async throws -> Bool {
        let rows = try await tx.query(
            """
            INSERT INTO job_leases (name, holder, expires_at_ms) VALUES (?, ?, ?)
            ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at_ms = excluded.expires_at_ms
                WHERE job_leases.holder = excluded.holder OR job_leases.expires_at_ms <= ?
            RETURNING holder
            """, [name, holder, now.addingTimeInterval(ttlSeconds), now])
        return rows.first?.optionalString("holder") == holder
    }
}
