import Auth
import Clock
import Entitlements
import Foundation
import HTTPTypes
import HummingbirdTesting
import Ledger
import Storage
import TestSupport
import Testing

@testable import AccountAPI

struct PurchaseRequestBody: Decodable, Equatable {
    let id: String
    let profileId: String
    let packId: String?
    let action: String?
    let description: String?
    let tokens: Int
    let status: String
}

/// A Pro account (150 tokens), a child profile that cannot purchase, selected on `kidToken`, and premium packs.
struct AskFixture {
    let client: any TestClientProtocol
    let ownerToken: String
    let kidToken: String
    let kid: String

    static func make(_ client: any TestClientProtocol, _ app: TestApp, email: String, packs: [String]) async throws -> AskFixture {
        let token = try await client.signUpAndVerify(app, email: email)
        let user = try await app.userID(token: token)
        let admin = try await app.apiKey(["admin"])
        #expect(try await client.comp(app, userID: user, plan: "pro_monthly", key: admin).status == .ok)
        for pack in packs { #expect(try await client.createPack(admin, id: pack, premium: true, price: 5).status == .created) }
        let kid = try await client.createProfile(token, #"{"name":"Kid","canMakePurchases":false}"#).json(ProfileBody.self).id
        let kidToken = try await client.signIn(email, "correct horse battery").json(SeedSignInResponse.self).session.token
        #expect(try await client.selectProfile(kidToken, kid).status == .ok)
        return AskFixture(client: client, ownerToken: token, kidToken: kidToken, kid: kid)
    }

    func ask(_ pack: String) async throws -> TestResponse { try await client.send(.post, "/api/stickers/packs/\(pack)/unlock", token: kidToken) }

    func list(_ token: String) async throws -> [PurchaseRequestBody] {
        struct List: Decodable { let purchaseRequests: [PurchaseRequestBody] }
        return try await client.get("/api/purchase-requests", token: token).json(List.self).purchaseRequests
    }

    func resolve(_ id: String, _ verb: String, token: String? = nil, json: String? = nil) async throws -> TestResponse {
        try await client.send(.post, "/api/purchase-requests/\(id)/\(verb)", token: token ?? ownerToken, json: json)
    }
}

@Suite("Ask to buy over HTTP")
struct AskToBuyHTTPTests {
    @Test("a child's unlock holds the price as a request; asking again merges; parallel approvals charge once", arguments: TestDatabase.engines)
    func askMergeAndApproveOnce(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let f = try await AskFixture.make(client, app, email: "b1@example.com", packs: ["stars"])
            let asked = try await f.ask("stars")
            #expect(asked.status == .accepted)
            let request = try #require(try asked.json(AskBody.self).purchaseRequest)
            #expect(request.status == "pending" && request.tokens == 5)
            #expect(try await client.balance(f.ownerToken).heldTokens == 5)
            let again = try await f.ask("stars")
            #expect(try again.status == .accepted && again.json(AskBody.self).purchaseRequest?.id == request.id)
            #expect(try await client.balance(f.ownerToken).heldTokens == 5)
            // A pack's request holds for the owner alone: no service capture charges it unanswered.
            let held = try await app.rows("SELECT hold_id FROM purchase_requests WHERE id = ?", [request.id])[0].string("hold_id")
            let taken = try await client.ledger(
                "/api/ledger/holds/\(held)/capture", key: try await app.apiKey(["ledger:write"]), idempotencyKey: "take", json: "{}")
            #expect(try taken.status == .conflict && taken.problem().code == "hold_awaiting_approval")
            #expect(try await app.mails(to: "b1@example.com").filter { $0.contains("Kid asks to buy") }.count == 1)
            #expect(try await f.list(f.kidToken).map(\.id) == [request.id])
            #expect(try await f.list(f.ownerToken).map(\.status) == ["pending"])

            // Only the owner's profile decides.
            let byKid = try await f.resolve(request.id, "approve", token: f.kidToken)
            #expect(try byKid.status == .forbidden && byKid.problem().code == "owner_profile_required")
            let taps = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<10 { group.addTask { try await f.resolve(request.id, "approve").status.code } }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(taps == Array(repeating: 200, count: 10))
            let balance = try await client.balance(f.ownerToken)
            #expect(balance.heldTokens == 0 && balance.totalTokens == 148)  // 3 welcome + 150 - 5, charged once
            #expect(try await client.usage(f.ownerToken, f.kid).used == 5)  // the ask counted on the child's allowance
            #expect(try await client.send(.post, "/api/entitlements/check", token: f.kidToken, json: #"{"packId":"stars"}"#).text.contains("true"))
            #expect(try await f.resolve(request.id, "decline").status == .conflict)
            #expect(try await f.resolve("nope", "approve").status == .notFound)
            #expect(try await app.dependencies.ledger.verify(logger: TestDatabase.logger).ok)
        }
    }

    /// An approval takes the ledger's lock order (the user's accounts, then the request), as an unlock does (its spend
    /// locks the accounts, then it cancels the pack's other requests): while another transaction holds the accounts, an
    /// approval waits without holding the request, so that transaction can still lock it (before, PostgreSQL found a
    /// deadlock and one of the two was retried); once it commits, the approval goes through.
    @Test("an approval locks the user's accounts before the request, as an unlock does", arguments: TestDatabase.engines)
    func anApprovalTakesTheLedgersLockOrder(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let f = try await AskFixture.make(client, app, email: "b10@example.com", packs: ["hail", "snow"])
            let request = try #require(try await f.ask("hail").json(AskBody.self).purchaseRequest)
            let userID = try await app.userID(token: f.ownerToken)
            let ledger = app.dependencies.ledger.ledger
            let approval = try await app.dependencies.database.transaction(logger: TestDatabase.logger) { tx in
                try await ledger.lockAccountsFirst(tx, userID: userID)
                let approval = Task { try await f.resolve(request.id, "approve").status }
                try await Task.sleep(for: .milliseconds(500))  // the approval is under way, waiting for the accounts
                if engine == .postgres {
                    // Fails with "lock not available" if the approval locked the request first.
                    _ = try await tx.query("SELECT id FROM purchase_requests WHERE id = ? FOR UPDATE NOWAIT", [request.id])
                }
                return approval
            }
            #expect(try await approval.value == .ok)
            #expect(try await f.list(f.ownerToken).map(\.status) == ["approved"])
            // An owner's unlock waits for the accounts before it claims the pack: the other transaction can still claim it
            // (and here gives the claim up by rolling back), where before it waited on the unlock's uncommitted claim.
            struct RolledBack: Error {}
            let (locked, lockedNow) = AsyncStream<Void>.makeStream()
            let holder = Task {
                try await app.dependencies.database.transaction(logger: TestDatabase.logger) { tx in
                    try await ledger.lockAccountsFirst(tx, userID: userID)
                    lockedNow.yield()
                    try await Task.sleep(for: .milliseconds(500))  // the unlock is under way, waiting for the accounts
                    try await tx.query(
                        "INSERT INTO pack_unlocks (user_id, pack_id, tokens_spent, created_at_ms) VALUES (?, 'snow', 0, 0)", [userID])
                    throw RolledBack()
                }
            }
            for await _ in locked { break }
            #expect(try await client.send(.post, "/api/stickers/packs/snow/unlock", token: f.ownerToken).status == .ok)
            await #expect(throws: RolledBack.self) { try await holder.value }
            #expect(try await app.dependencies.ledger.verify(logger: TestDatabase.logger).ok)
        }
    }

    @Test("an answer from an owner's session revoked before it commits changes nothing", arguments: TestDatabase.engines)
    func anAnswerFromARevokedSessionChangesNothing(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let f = try await AskFixture.make(client, app, email: "b9@example.com", packs: ["rain"])
            let request = try #require(try await f.ask("rain").json(AskBody.self).purchaseRequest)
            let auth = app.dependencies.auth
            // The owner's session as an approval that authenticated it sees it; then the owner signs out everywhere.
            let stale = try await auth.authenticate(token: f.ownerToken, logger: TestDatabase.logger)
            let userID = stale.user.id
            _ = try await auth.revokeSessions(ofUser: userID, sessionID: nil, actor: "test", ip: nil, logger: TestDatabase.logger)
            for answer in ["approve", "decline"] {
                await #expect(throws: AuthError.unauthorized, "\(answer)") {
                    let stickers = app.dependencies.stickers
                    if answer == "approve" {
                        _ = try await stickers.approvePurchase(
                            userID: userID, requestID: request.id, authorise: auth.stillLive(stale), logger: TestDatabase.logger)
                    } else {
                        _ = try await stickers.declinePurchase(
                            userID: userID, requestID: request.id, authorise: auth.stillLive(stale), logger: TestDatabase.logger)
                    }
                }
            }
            let row = try await app.rows("SELECT status FROM purchase_requests WHERE id = ?", [request.id])
            #expect(try row.first?.string("status") == "pending")
            #expect(try await app.rows("SELECT pack_id FROM pack_unlocks WHERE user_id = ?", [userID]).isEmpty)
        }
    }

    @Test("decline voids the hold; an expired request cannot be approved; the owner's PIN guards approval", arguments: TestDatabase.engines)
    func declineExpireAndPIN(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let f = try await AskFixture.make(client, app, email: "b2@example.com", packs: ["moon", "sun", "comet"])
            let moon = try #require(try await f.ask("moon").json(AskBody.self).purchaseRequest)
            let declined = try await f.resolve(moon.id, "decline")
            #expect(try declined.status == .ok && declined.json(PurchaseRequestBody.self).status == "declined")
            #expect(try await f.resolve(moon.id, "decline").status == .ok)
            let late = try await f.resolve(moon.id, "approve")
            #expect(try late.status == .conflict && late.problem().code == "purchase_request_resolved")
            #expect(try await client.balance(f.ownerToken).heldTokens == 0)
            // Declined, the child may ask again: a new request.
            let again = try #require(try await f.ask("moon").json(AskBody.self).purchaseRequest)
            #expect(again.id != moon.id)

            // The owner's PIN, when set, is needed to approve (on the PIN budget).
            let owner = try await client.defaultProfileID(f.ownerToken)
            let pinned = try await client.send(
                .put, "/api/family-profiles/\(owner)", token: f.ownerToken, json: #"{"name":"Ada","canMakePurchases":true,"pin":"1357"}"#)
            #expect(pinned.status == .ok)
            let sun = try #require(try await f.ask("sun").json(AskBody.self).purchaseRequest)
            let noPIN = try await f.resolve(sun.id, "approve")
            #expect(try noPIN.status == .forbidden && noPIN.problem().code == "invalid_pin")
            let wrong = try await f.resolve(sun.id, "approve", json: #"{"pin":"0000"}"#)
            #expect(try wrong.status == .forbidden && wrong.problem().code == "invalid_pin")
            #expect(try await f.list(f.ownerToken).first { $0.id == sun.id }?.status == "pending")
            #expect(try await f.resolve(sun.id, "approve", json: #"{"pin":"1357"}"#).status == .ok)

            // Past 48 hours a request is expired: its hold is released, and it cannot be approved.
            let comet = try #require(try await f.ask("comet").json(AskBody.self).purchaseRequest)
            app.clock.advance(seconds: 48 * 3600 + 1)
            let token = try await client.signIn("b2@example.com", "correct horse battery").json(SeedSignInResponse.self).session.token
            #expect(try await f.list(token).first { $0.id == comet.id }?.status == "expired")
            let expired = try await f.resolve(comet.id, "approve", token: token, json: #"{"pin":"1357"}"#)
            #expect(try expired.status == .conflict && expired.problem().code == "purchase_request_resolved")
            #expect(try await client.balance(token).heldTokens == 0)
            #expect(try await app.dependencies.ledger.verify(logger: TestDatabase.logger).ok)
        }
    }

    @Test("once a pack is the account's, other pending requests for it are cancelled and their holds released", arguments: TestDatabase.engines)
    func ownedPacksCancelPendingRequests(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let f = try await AskFixture.make(client, app, email: "b3@example.com", packs: ["p1", "p2"])
            let sibling = try await client.createProfile(f.ownerToken, #"{"name":"Sib","canMakePurchases":false}"#).json(ProfileBody.self).id
            let siblingToken = try await client.signIn("b3@example.com", "correct horse battery").json(SeedSignInResponse.self).session.token
            #expect(try await client.selectProfile(siblingToken, sibling).status == .ok)
            let mine = try #require(try await f.ask("p1").json(AskBody.self).purchaseRequest)
            let theirs = try #require(
                try await client.send(.post, "/api/stickers/packs/p1/unlock", token: siblingToken).json(AskBody.self).purchaseRequest)
            #expect(try await client.balance(f.ownerToken).heldTokens == 10)
            #expect(try await f.resolve(mine.id, "approve").status == .ok)
            #expect(try await f.list(f.ownerToken).first { $0.id == theirs.id }?.status == "cancelled")
            #expect(try await client.balance(f.ownerToken).heldTokens == 0)
            // The owner buying the pack directly cancels the child's request too.
            _ = try await f.ask("p2")
            #expect(try await client.send(.post, "/api/stickers/packs/p2/unlock", token: f.ownerToken).status == .ok)
            #expect(try await client.balance(f.ownerToken).heldTokens == 0)
            // Asking for a pack the account owns is 409 already_unlocked, as for anyone (not "ask a parent").
            let owned = try await f.ask("p2")
            #expect(try owned.status == .conflict && owned.problem().code == "already_unlocked")
            // A PIN that cannot be one is a 400 and costs no guess.
            let owner = try await client.defaultProfileID(f.ownerToken)
            _ = try await client.send(
                .put, "/api/family-profiles/\(owner)", token: f.ownerToken, json: #"{"name":"Ada","canMakePurchases":true,"pin":"1357"}"#)
            #expect(try await client.selectProfile(siblingToken, owner, pin: "١٣٥٧").status == .badRequest)
            let wrong = try await client.selectProfile(siblingToken, owner, pin: "0000")
            #expect(try wrong.json([String: JSONValue].self)["attemptsRemaining"] == .integer(4))
            #expect(try await app.dependencies.ledger.verify(logger: TestDatabase.logger).ok)
        }
    }

    @Test("deleting the asking profile, or erasing the account, cancels pending requests and releases their tokens", arguments: TestDatabase.engines)
    func deletionCancelsRequests(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let f = try await AskFixture.make(client, app, email: "b4@example.com", packs: ["p1", "p2"])
            let first = try #require(try await f.ask("p1").json(AskBody.self).purchaseRequest)
            #expect(try await client.send(.delete, "/api/family-profiles/\(f.kid)", token: f.ownerToken).status == .noContent)
            #expect(try await f.list(f.ownerToken).first { $0.id == first.id }?.status == "cancelled")
            #expect(try await client.balance(f.ownerToken).heldTokens == 0)
            #expect(try await f.resolve(first.id, "approve").status == .conflict)
            // A request that read the profile before it was deleted acts no more (its session must choose again), even
            // with permissions that would have bought the pack.
            let stale = ProfilePermissions(id: f.kid, name: "Kid", canMakePurchases: true, canUseCustomContentTypes: true)
            await #expect(throws: EntitlementError.profileSelectionRequired) {
                _ = try await app.dependencies.stickers.unlock(
                    userID: try await app.userID(token: f.ownerToken), packID: "p2", profile: stale, logger: TestDatabase.logger)
            }
            let kid = try await client.createProfile(f.ownerToken, #"{"name":"Kid2","canMakePurchases":false}"#).json(ProfileBody.self).id
            #expect(try await client.selectProfile(f.kidToken, kid).status == .ok)
            let second = try #require(try await f.ask("p2").json(AskBody.self).purchaseRequest)
            #expect(
                try await client.send(.delete, "/api/user/me", token: f.ownerToken, json: #"{"password":"correct horse battery"}"#).status
                    == .noContent)
            let status = try await app.dependencies.database.withConnection(logger: TestDatabase.logger) { tx in
                try await tx.first("SELECT status FROM purchase_requests WHERE id = ?", [second.id])?.optionalString("status")
            }
            #expect(status == "cancelled")
            #expect(try await app.dependencies.ledger.verify(logger: TestDatabase.logger).ok)
        }
    }

    @Test(
        "a service's reserve with askToBuy asks the owner: approval hands the hold to the service once, decline voids it",
        arguments: TestDatabase.engines)
    func reserveAsksToBuy(engine: Engine) async throws {
        try await TestApp.run(engine, configure: TestApp.webhookConfig) { client, app in
            let f = try await AskFixture.make(client, app, email: "b9@example.com", packs: [])
            let user = try await app.userID(token: f.ownerToken)
            let admin = try await app.apiKey(["admin"])
            let hook = #"{"url":"http://127.0.0.1:9/hook","events":["purchase_request.created","purchase_request.resolved"]}"#
            #expect(try await client.send(.post, "/api/admin/webhooks", token: admin, json: hook).status == .created)
            let service = try await app.apiKey(["entitlements:read", "ledger:write"])
            struct Asked: Decodable { let holdId: String?; let tokens: Int; let purchaseRequest: PurchaseRequestBody }
            func ask(_ key: String) async throws -> TestResponse {
                let body = #"{"userId":"\#(user)","profileId":"\#(f.kid)","action":"generate.coloring_pages","quantity":2,"askToBuy":true}"#
                return try await client.reserve(service, body, idempotencyKey: key)
            }
            let asked = try await ask("ask-1")
            let first = try asked.json(Asked.self)
            #expect(asked.status == .accepted && first.holdId == nil && first.tokens == 2)
            #expect(first.purchaseRequest.status == "pending" && first.purchaseRequest.packId == nil)
            #expect(first.purchaseRequest.action == "generate.coloring_pages" && first.purchaseRequest.description == "Coloring page ×2")
            let replay = try await ask("ask-1")
            #expect(replay.status == .accepted && replay.text == asked.text)
            #expect(try await client.balance(f.ownerToken).heldTokens == 2)
            #expect(try await app.mails(to: "b9@example.com").filter { $0.contains("Coloring page") }.count == 1)
            #expect(try await f.list(f.ownerToken).map(\.id) == [first.purchaseRequest.id])
            // The hold is the owner's to answer: a service that learned its id (hold.created) can neither capture nor void it.
            let pendingHold = try await app.rows("SELECT hold_id FROM purchase_requests WHERE id = ?", [first.purchaseRequest.id])[0].string(
                "hold_id")
            for verb in ["capture", "void"] {
                let early = try await client.ledger(
                    "/api/ledger/holds/\(pendingHold)/\(verb)", key: service, idempotencyKey: "early-\(verb)", json: "{}")
                #expect(try early.status == .conflict && early.problem().code == "hold_awaiting_approval", "\(verb)")
            }
            let badTTL = #"{"userId":"\#(user)","profileId":"\#(f.kid)","tokens":1,"ttlSeconds":0,"askToBuy":true}"#
            #expect(try await client.reserve(service, badTTL).status == .badRequest)

            // Ten parallel approvals resolve it once; the service learns the hold from the event and captures it.
            let taps = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<10 { group.addTask { try await f.resolve(first.purchaseRequest.id, "approve").status.code } }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(taps == Array(repeating: 200, count: 10))
            #expect(try await client.balance(f.ownerToken).heldTokens == 2)  // approved, not yet captured: the service decides
            let events = try await Self.events(app, "purchase_request.resolved")
            #expect(events.count == 1)
            let holdID = try #require(Self.holdID(in: events[0]))
            #expect(holdID == pendingHold)
            // The same key that was refused before the approval captures now (a refusal to wait is not remembered).
            let captured = try await client.ledger("/api/ledger/holds/\(holdID)/capture", key: service, idempotencyKey: "early-capture", json: "{}")
            #expect(captured.status == .ok)
            let after = try await client.balance(f.ownerToken)
            #expect(after.heldTokens == 0 && after.totalTokens == 151)  // 3 welcome + 150 Pro - 2

            // Declined: the hold goes back and the event names no hold.
            let second = try await ask("ask-2").json(Asked.self)
            #expect(try await f.resolve(second.purchaseRequest.id, "decline").status == .ok)
            #expect(try await client.balance(f.ownerToken).heldTokens == 0)
            let resolved = try await Self.events(app, "purchase_request.resolved")
            #expect(resolved.count == 2 && resolved.filter { Self.holdID(in: $0) == nil }.count == 1)
            #expect(try await Self.events(app, "purchase_request.created").count == 2)
            // A profile that may purchase (the owner's) is reserved for at once; askToBuy changes nothing.
            let owner = try await client.defaultProfileID(f.ownerToken)
            let direct = try await client.reserve(
                service, #"{"userId":"\#(user)","profileId":"\#(owner)","tokens":1,"askToBuy":true}"#, idempotencyKey: "ask-3")
            #expect(try direct.status == .created && direct.json(ReservationBody.self).tokens == 1)
        }
    }

    /// The bodies of `type` events, whether still in the outbox or fanned out to deliveries.
    static func events(_ app: TestApp, _ type: String) async throws -> [String] {
        let rows = try await app.rows(
            "SELECT data AS body FROM outbox_events WHERE type = ? UNION ALL SELECT body FROM webhook_deliveries WHERE event_type = ?", [type, type])
        return try rows.map { try $0.string("body") }
    }

    static func holdID(in body: String) -> String? {
        guard let range = body.range(of: #""holdId":"[0-9a-f-]+""#, options: .regularExpression) else { return nil }
        return String(body[range].dropFirst(10).dropLast())
    }
}
