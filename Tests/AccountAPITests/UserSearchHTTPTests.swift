import Foundation
import HTTPTypes
import HummingbirdTesting
import Storage
import TestSupport
import Testing

@testable import AccountAPI

/// Operators search users by the start of their email, in byte order, keyset-paged (the index is held by
/// `QueryPlanTests`).
@Suite("User search over HTTP")
struct UserSearchHTTPTests {
    struct Page: Decodable { let users: [User]; let nextCursor: String?; struct User: Decodable { let email: String } }

    @Test(arguments: Engine.allCases)
    func searchPagesThroughEmailsStartingWithTheQuery(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let key = try await app.apiKey(["admin"])
            let emails = ["ann3@x.test", "bob@x.test", "ann1@x.test", "anna@x.test", "ann\u{1F600}@x.test", "ann2@x.test", "an@x.test", "ano@x.test"]
            try await app.dependencies.database.transaction(logger: TestDatabase.logger) { tx in
                for (index, email) in emails.enumerated() {
                    try await tx.query(
                        """
                        INSERT INTO users (id, email, name, password_hash, email_verified, role, prompt_enhancement_enabled, created_at_ms, updated_at_ms)
                        VALUES (?, ?, 'Search', NULL, TRUE, 'user', TRUE, ?, ?)
                        """, ["search-\(index)", email, index, index])
                }
            }
            var pages: [[String]] = []
            var cursor: String?
            repeat {
                let after = cursor.map { "&cursor=" + ($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "") } ?? ""
                let response = try await client.get("/api/admin/users?query=%20ANN&limit=2" + after, token: key)
                #expect(response.status == .ok)
                let page = try response.json(Page.self)
                pages.append(page.users.map(\.email))
                cursor = page.nextCursor
            } while cursor != nil && pages.count < 10
            #expect(pages == [["ann1@x.test", "ann2@x.test"], ["ann3@x.test", "anna@x.test"], ["ann\u{1F600}@x.test"]])
            #expect(try await client.get("/api/admin/users?query=zzz", token: key).json(Page.self).users.isEmpty)
            for bad in ["", String(repeating: "a", count: 255), "a%00b"] {
                let response = try await client.get("/api/admin/users?query=\(bad)", token: key)
                #expect(response.status == .badRequest, "query \(bad.prefix(8)): \(response.text)")
            }
            #expect(try await client.get("/api/admin/users?query=ann&cursor=a%00", token: key).status == .badRequest)
            let stranger = try await client.signUpAndVerify(app, email: "annie@x.test")
            #expect(try await client.get("/api/admin/users?query=ann", token: stranger).status == .forbidden)
            #expect(try await client.get("/api/admin/users?query=ann", token: nil).status == .unauthorized)
        }
    }
}
