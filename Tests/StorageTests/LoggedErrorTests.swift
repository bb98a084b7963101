import Storage
import TestSupport
import Testing

/// What a failed statement leaves in a log: enough to act on (the SQLSTATE or SQLite's message, the constraint), never
/// the row's values (PostgreSQL's `detail` quotes the failing row) nor postgres-nio's "Generic description".
@Suite("Logged errors")
struct LoggedErrorTests {
    @Test(arguments: TestDatabase.engines)
    func aFailedStatementIsDescribedByItsCauseNotItsValues(engine: Engine) async throws {
        try await TestDatabase.with(engine) { db, _ in
            try await db.transaction(logger: TestDatabase.logger) { tx in
                try await tx.query("CREATE TABLE sealed (id TEXT PRIMARY KEY, amount BIGINT NOT NULL CONSTRAINT amount_positive CHECK (amount > 0))")
            }
            do {
                try await db.transaction(logger: TestDatabase.logger) { tx in
                    try await tx.query("INSERT INTO sealed (id, amount) VALUES (?, ?)", ["alice@example.com", -7])
                }
                Issue.record("the insert broke a CHECK constraint and succeeded")
            } catch {
                let logged = loggedDescription(of: error)
                #expect(logged.contains("amount_positive"), "\(logged)")
                #expect(!logged.contains("alice@example.com") && !logged.contains("-7"), "\(logged)")
                #expect(!logged.contains("Generic description"), "\(logged)")
                if engine == .postgres { #expect(logged.contains("23514"), "\(logged)") }
            }
        }
    }
}
