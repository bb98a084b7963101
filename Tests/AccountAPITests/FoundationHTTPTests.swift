import Entitlements
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Storage
import TestSupport
import Testing

@testable import AccountAPI

@Suite("Foundation over HTTP")
struct FoundationHTTPTests {
    @Test(arguments: TestDatabase.engines)
    func healthAndReady(engine: Engine) async throws {
        try await TestApp.run(engine) { client, _ in
            let health = try await client.execute(uri: "/health", method: .get)
            #expect(health.status == .ok)
            #expect(health.text == #"{"status":"ok"}"#)
            #expect(health.headers[.requestID] != nil)
            let ready = try await client.execute(uri: "/ready", method: .get)
            #expect(ready.status == .ok)
            #expect(try ready.json([String: String].self) == ["status": "ready", "database": engine.rawValue])
        }
    }

    @Test(arguments: TestDatabase.engines)
    func readyAnswers503WhenTheDatabaseIsGone(engine: Engine) async throws {
        // A lease of 60 s: waiting it out is then told from the readiness check's own 2 s with room for a loaded machine.
        try await TestApp.run(engine, configure: { $0.databaseLeaseTimeoutSeconds = 60 }) { client, app in
            // Stop the database under the running service: drop it (PostgreSQL) or close the file (SQLite).
            switch engine {
            case .postgres: try await app.handle.drop()
            case .sqlite: try await app.dependencies.database.close()
            }
            let started = ContinuousClock.now
            let ready = try await client.execute(uri: "/ready", method: .get)
            #expect(ready.status == .serviceUnavailable)
            #expect(try ready.problem().code == "unavailable")
            #expect(ready.headers[.retryAfter] != nil)
            // The readiness check gives up after 2 s; the bound only tells it from waiting out the pool's lease (a loaded
            // CI machine has taken 7 s to answer).
            #expect(ContinuousClock.now - started < .seconds(30))
        }
    }

    @Test func openAPIIsServedVerbatim() async throws {
        try await TestApp.run(.sqlite) { client, _ in
            let response = try await client.execute(uri: "/openapi.yaml", method: .get)
            #expect(response.status == .ok)
            #expect(response.headers[.contentType]?.hasPrefix("application/yaml") == true)
            let file = try String(contentsOf: repositoryRoot.appendingPathComponent("openapi.yaml"), encoding: .utf8)
            #expect(response.text == file, "run scripts/embed-resources")
        }
    }

    @Test(arguments: TestDatabase.engines)
    func plansDecodeWithTheSeedStructs(engine: Engine) async throws {
        try await TestApp.run(engine) { client, _ in
            let response = try await client.execute(uri: "/api/subscription-plans", method: .get)
            #expect(response.status == .ok)
            let plans = try response.json([SeedSubscriptionPlan].self)
            #expect(
                plans.map(\.id) == [
                    "free", "basic_monthly", "basic_yearly", "pro_monthly", "pro_yearly", "max_monthly", "max_yearly", "business_monthly",
                    "business_yearly",
                ])
            #expect(plans.map(\.sortOrder) == plans.map(\.sortOrder).sorted())
            let byID = Dictionary(uniqueKeysWithValues: plans.map { ($0.id, $0) })
            #expect(byID["free"]?.isFreeTier == true && byID["free"]?.maxFamilyProfiles == 1)
            #expect(byID["basic_monthly"]?.hasImageUpload == true && byID["basic_monthly"]?.maxFamilyProfiles == 1)
            #expect(byID["pro_monthly"]?.maxFamilyProfiles == 5 && byID["pro_monthly"]?.features.familyProfiles == true)
            #expect(byID["max_yearly"]?.hasQualitySelector == true && byID["max_yearly"]?.hasCommercialLicense == true)
            #expect(byID["max_yearly"]?.hasModelSelector == false)
            #expect(byID["business_monthly"]?.hasModelSelector == true && byID["business_monthly"]?.features.prioritySupport == true)
            #expect(byID["business_monthly"]?.maxFamilyProfiles == 10)
        }
    }

    @Test func unknownRoutesAre404Problems() async throws {
        try await TestApp.run(.sqlite) { client, _ in
            let response = try await client.execute(uri: "/api/nope", method: .get)
            #expect(response.status == .notFound)
            let problem = try response.problem()
            #expect(problem.code == "not_found")
            #expect(problem.detail.contains("/api/nope"))
        }
    }
}

/// Bad input never reaches a 500: the JSON decoding path every endpoint uses, on a probe route.
@Suite("Bad input")
struct BadInputTests {
    struct Probe: Decodable, Sendable { let email: String; let count: Int }

    static func withProbe(_ body: @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        let router = Router(context: AppRequestContext.self)
        router.add(middleware: AccessLogMiddleware())
        router.add(middleware: ProblemMiddleware(allowedMethods: AllowedMethods()))
        router.post("/probe") { request, context in
            var request = request
            let probe = try await request.decodeJSON(Probe.self, context: context)
            return JSONResponse(["email": probe.email])
        }
        router.get("/boom") { _, _ -> String in throw CocoaError(.fileNoSuchFile) }
        try await Application(router: router, logger: TestDatabase.logger).test(.router) { try await body($0) }
    }

    @Test func malformedJSON() async throws {
        try await Self.withProbe { client in
            let r = try await client.post("/probe", json: "{\"email\": ")
            #expect(r.status == .badRequest)
            #expect(try r.problem().code == "validation_failed")
            #expect(try r.problem().detail.contains("not valid JSON"))
        }
    }

    @Test func missingFieldAndWrongType() async throws {
        try await Self.withProbe { client in
            let missing = try await client.post("/probe", json: #"{"email":"a@b.c"}"#)
            #expect(missing.status == .badRequest)
            #expect(try missing.problem().detail == "Missing field 'count'.")
            let wrong = try await client.post("/probe", json: #"{"email":"a@b.c","count":"three"}"#)
            #expect(wrong.status == .badRequest)
            #expect(try wrong.problem().detail.contains("'count' has the wrong type (expected a number)"))
            let null = try await client.post("/probe", json: #"{"email":null,"count":1}"#)
            #expect(null.status == .badRequest)
            #expect(try null.problem().detail.contains("'email' must not be null"))
        }
    }

    @Test func wrongContentTypeAndEmptyBody() async throws {
        try await Self.withProbe { client in
            let form = try await client.post("/probe", json: "email=a", headers: [.contentType: "application/x-www-form-urlencoded"])
            #expect(form.status == .unsupportedMediaType)
            #expect(try form.problem().code == "validation_failed")
            let empty = try await client.post("/probe", json: "")
            #expect(empty.status == .badRequest)
        }
    }

    @Test func bodiesOverOneMiBAre413() async throws {
        try await Self.withProbe { client in
            let big = #"{"email":""# + String(repeating: "x", count: (1 << 20) + 10) + #"","count":1}"#
            let r = try await client.post("/probe", json: big)
            #expect(r.status == .contentTooLarge)
            #expect(try r.problem().code == "validation_failed")
        }
    }

    @Test func unexpectedErrorsAre500ProblemsWithoutInternals() async throws {
        try await Self.withProbe { client in
            let r = try await client.execute(uri: "/boom", method: .get)
            #expect(r.status == .internalServerError)
            let problem = try r.problem()
            #expect(problem.code == "internal_error")
            #expect(!problem.detail.contains("Cocoa"))
            #expect(r.headers[.requestID] != nil)
        }
    }
}
