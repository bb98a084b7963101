import Foundation
import HTTPTypes
import HummingbirdTesting
import Storage
import TestSupport
import Testing

@testable import AccountAPI

@Suite("Metrics")
struct MetricsHTTPTests {
    @Test(arguments: TestDatabase.engines)
    func metricsExposeRequestsLedgerArgon2DatabaseAndBilling(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let token = try await client.signUpAndVerify(app, email: "metrics@example.com")
            #expect(try await client.get("/api/user/token-balance", token: token).status == .ok)
            #expect(try await client.get("/api/nope", token: nil).status == .notFound)
            #expect(try await client.appleNotify(#"{"signedPayload":"x.y.z"}"#).status == .badRequest)
            let key = try await app.apiKey(["ledger:write"])
            let user = try await app.userID(token: token)
            #expect(
                try await client.ledger(
                    "/api/ledger/holds", key: key, idempotencyKey: "m1", json: #"{"userId":"\#(user)","amount":1,"reason":"job"}"#
                ).status == .created)
            #expect(try await client.get("/metrics", token: nil).status == .unauthorized)
            #expect(try await client.get("/metrics", token: "wrong-token-0123456789").status == .unauthorized)
            let response = try await client.get("/metrics", token: TestApp.metricsToken)
            #expect(response.status == .ok && response.headers[.contentType]?.hasPrefix("text/plain") == true)
            let text = response.text
            for needle in [
                #"hb_requests{http_route="/api/user/token-balance",http_request_method="GET",http_response_status_code="200"}"#,
                #"http_response_status_code="404""#, "http_server_request_duration_bucket{", #"ledger_transfers{reason="welcome"}"#,
                #"ledger_transfers{reason="hold"}"#, "ledger_holds_pending ", "argon2_queue_depth", "argon2_wait_bucket",
                "db_connections_in_use{engine=",
                #"billing_events{provider="apple",outcome="unverified"}"#,
            ] {
                #expect(text.contains(needle), "missing \(needle)")
            }
            // Errors are counted by status, and each answered request has its duration (the registry is the
            // process's, shared with tests running alongside, so only the series are checked, not their values).
            #expect(text.contains(#"hb_request_errors{http_route="NotFound",http_request_method="GET",error_type="404"} "#))
            #expect(text.contains(#"http_server_active_requests{http_request_method="GET"} "#))
            #expect(
                text.contains(
                    #"http_server_request_duration_count{http_route="/api/user/token-balance",http_request_method="GET",http_response_status_code="200"} "#
                ))
            // The raw path of unknown routes never becomes a label (bounded series).
            #expect(!text.contains("/api/nope"))
            // Every sample line parses as `name{labels} value`.
            let samples = text.split(separator: "\n").filter { !$0.hasPrefix("#") && !$0.isEmpty }
            #expect(
                !samples.isEmpty
                    && samples.allSatisfy {
                        $0.range(of: #"^[a-zA-Z_][a-zA-Z0-9_]*(\{.*\})? [-+0-9.eE]+(Inf)?$"#, options: .regularExpression) != nil
                    })
        }
    }
}

@Suite("Input hardening")
struct InputHardeningTests {
    /// Found by probing after schemathesis: PostgreSQL cannot store U+0000, which used to surface as a 500.
    @Test(arguments: TestDatabase.engines)
    func nulCharactersAreA400OnBothEngines(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let key = try await app.apiKey(["admin", "ledger:write"])
            let signIn = try await client.post("/api/auth/sign-in", json: #"{"email":"a\u0000@example.com","password":"long enough password"}"#)
            #expect(try signIn.status == .badRequest && signIn.problem().detail.contains("NUL"))
            let grant = try await client.ledger(
                "/api/ledger/grants", key: key, idempotencyKey: "nul-1", json: #"{"userId":"x\u0000","amount":1,"bucket":"bonus","reason":"r"}"#)
            #expect(grant.status == .badRequest)
            let pack = try await client.send(
                .post, "/api/admin/stickers/packs", token: key,
                json:
                    #"{"id":"p1","name":"a\u0000b","description":"d","iconUrl":"https://cdn.example.com/a.png","category":"seasonal","isPremium":true,"tokenPrice":1,"includedInPlans":[],"isActive":true,"sortOrder":1,"stickerCount":1,"previewStickers":[]}"#
            )
            #expect(pack.status == .badRequest)
            #expect(try await app.rows("SELECT id FROM sticker_packs").isEmpty)
        }
    }
}
