import Foundation
import PostgresNIO
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

extension LoggedErrorTests {
    /// A connection that fails before the server says anything: the kind of failure and its cause, not just "connectionError".
    @Test func aConnectionFailureNamesItsCause() async throws {
        let refused = PostgresConnection.Configuration(
            host: "127.0.0.1", port: 9, username: "nobody", password: "pw-never-logged", database: "x", tls: .disable)
        do {
            let connection = try await PostgresConnection.connect(configuration: refused, id: 1, logger: TestDatabase.logger)
            try? await connection.close()
            Issue.record("connected to a closed port")
        } catch {
            let logged = loggedDescription(of: error)
            #expect(logged.contains("connectionError") && logged.lowercased().contains("refused"), "\(logged)")
            #expect(!logged.contains("pw-never-logged"), "\(logged)")
        }
    }

    /// Foundation's coding errors quote the value they refused; the log gets the case and the path.
    @Test func aCodingErrorGivesItsPathNotTheValue() throws {
        enum Colour: String, Decodable { case red }
        struct Body: Decodable { let count: Int; let colour: Colour? }
        for (json, path) in [(#"{"count":"secret-1"}"#, "count"), (#"{"count":1,"colour":"secret-2"}"#, "colour")] {
            do {
                _ = try JSONDecoder().decode(Body.self, from: Data(json.utf8))
                Issue.record("decoded \(json)")
            } catch {
                let logged = loggedDescription(of: error)
                #expect(logged.contains("decoding failed") && logged.hasSuffix(path) && !logged.contains("secret"), "\(logged)")
            }
        }
    }
}
