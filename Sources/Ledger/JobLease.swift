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

    /// Hands the lease back (a node shutting down): another node takes it at its next pass instead of after the ttl.
    /// Does nothing when this holder no longer has it.
    public func release(_ tx: any SQLExecutor) async throws {
        _ = try await tx.query("UPDATE job_leases SET expires_at_ms = 0 WHERE name = ? AND holder = ?", [name, holder])
    }
}
