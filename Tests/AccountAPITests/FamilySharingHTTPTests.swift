import Clock
import Foundation
import HTTPTypes
import HummingbirdTesting
import Storage
import TestSupport
import Testing

@testable import AccountAPI

@Suite("Apple Family Sharing over HTTP")
struct FamilySharingHTTPTests {
    struct SubscriptionBody: Decodable { let planId: String; let status: String?; let isEntitled: Bool; let familyShared: Bool }

    static let product = "com.yourapp.pro.monthly"

    static func subscription(_ client: any TestClientProtocol, _ token: String) async throws -> SubscriptionBody {
        try await client.get("/api/user/subscription", token: token).json(SubscriptionBody.self)
    }

    @Test("a family member gets the plan's features, not its tokens; renewals and REVOKE touch the member only", arguments: TestDatabase.engines)
    func memberGetsFeaturesNotTokens(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let buyer = try await client.signUpAndVerify(app, email: "fs-buyer@example.com")
            let buyerID = try await app.userID(token: buyer)
            let member = try await client.signUpAndVerify(app, email: "fs-member@example.com")
            let now = app.clock.now()
            let month = now.addingTimeInterval(30 * 86400)
            #expect(
                try await client.appleVerify(
                    buyer, try fx.transaction(id: "P1", product: Self.product, purchase: now, expires: month, token: buyerID)
                ).status == .ok)
            let buyerTokens = try await client.balance(buyer).subscriptionTokens
            #expect(buyerTokens > 0)

            // The member's own transaction of the shared purchase carries the purchaser's token: bound to the member.
            let shared = try fx.transaction(
                id: "M1", product: Self.product, purchase: now, expires: month, token: buyerID, ownership: "FAMILY_SHARED")
            let verified = try await client.appleVerify(member, shared)
            #expect(try verified.status == .ok && (verified.json(VerifyBody.self).outcome) == "applied")
            var state = try await Self.subscription(client, member)
            #expect(state.planId == "pro_monthly" && state.isEntitled && state.familyShared)
            #expect(try await client.balance(member).subscriptionTokens == 0)
            #expect(try await !Self.subscription(client, buyer).familyShared)
            // Features apply: the member may create family profiles as Pro allows.
            #expect(try await client.createProfile(member, #"{"name":"Kid"}"#).status == .created)

            // A renewal of the member's chain (Apple notifies each member) grants nothing and never reaches the buyer.
            let renewed = try fx.transaction(
                id: "M2", original: "M1", product: Self.product, purchase: month, expires: month.addingTimeInterval(30 * 86400), token: buyerID,
                signed: now.addingTimeInterval(60), ownership: "FAMILY_SHARED")
            let renewal = try await client.appleNotify(try fx.notification("DID_RENEW", signed: now.addingTimeInterval(60), transaction: renewed))
            #expect(try renewal.json(ReceivedBody.self).outcome == "applied")
            #expect(try await client.balance(member).subscriptionTokens == 0)
            #expect(try await client.balance(buyer).subscriptionTokens == buyerTokens)

            // The buyer stops sharing: Apple revokes the member's transaction. The member falls back; the buyer keeps all.
            let revokedTxn = try fx.transaction(
                id: "M2", original: "M1", product: Self.product, purchase: month, expires: month.addingTimeInterval(30 * 86400), token: buyerID,
                signed: now.addingTimeInterval(120), revoked: now.addingTimeInterval(120), ownership: "FAMILY_SHARED")
            let revoke = try await client.appleNotify(try fx.notification("REVOKE", signed: now.addingTimeInterval(120), transaction: revokedTxn))
            #expect(try revoke.json(ReceivedBody.self).outcome == "applied")
            state = try await Self.subscription(client, member)
            #expect(!state.isEntitled && state.planId == "pro_monthly" && state.status == "expired")
            let buyerState = try await Self.subscription(client, buyer)
            #expect(buyerState.isEntitled && !buyerState.familyShared)
            #expect(try await client.balance(buyer).subscriptionTokens == buyerTokens)
            // A shared token pack (Apple never shares consumables) grants nothing.
            let pack = try fx.transaction(id: "M3", product: "com.yourapp.tokens.25", purchase: now, token: nil, ownership: "FAMILY_SHARED")
            #expect(try await client.appleVerify(member, pack).json(VerifyBody.self).outcome == "ignored")
            #expect(try await client.balance(member).purchasedTokens == 0)
        }
    }

    @Test("a member's own subscription outranks shared access; a shared REVOKE leaves it alone", arguments: TestDatabase.engines)
    func ownSubscriptionOutranksSharedAccess(engine: Engine) async throws {
        let fx = try BillingFixture()
        try await TestApp.run(engine, configure: fx.configure) { client, app in
            let member = try await client.signUpAndVerify(app, email: "fs-own@example.com")
            let memberID = try await app.userID(token: member)
            let now = app.clock.now()
            let month = now.addingTimeInterval(30 * 86400)
            let own = try fx.transaction(id: "O1", product: "com.yourapp.basic.monthly", purchase: now, expires: month, token: memberID)
            #expect(try await client.appleVerify(member, own).status == .ok)
            let tokens = try await client.balance(member).subscriptionTokens
            let shared = try fx.transaction(id: "S1", product: Self.product, purchase: now, expires: month, token: nil, ownership: "FAMILY_SHARED")
            let answer = try await client.appleVerify(member, shared).json(VerifyBody.self)
            #expect(answer.outcome == "ignored" && answer.subscription.planId == "basic_monthly")
            let revoked = try fx.transaction(
                id: "S1", product: Self.product, purchase: now, expires: month, token: nil, signed: now.addingTimeInterval(60),
                revoked: now.addingTimeInterval(60), ownership: "FAMILY_SHARED")
            let revoke = try await client.appleNotify(try fx.notification("REVOKE", signed: now.addingTimeInterval(60), transaction: revoked))
            #expect(try revoke.json(ReceivedBody.self).outcome == "ignored")
            var state = try await Self.subscription(client, member)
            #expect(state.planId == "basic_monthly" && state.isEntitled && !state.familyShared)
            #expect(try await client.balance(member).subscriptionTokens == tokens)
            // The shared chain's other state events (the purchaser's card failing, the share expiring) never reach the
            // member's own subscription, not even once it is past due itself.
            for (index, type) in ["DID_FAIL_TO_RENEW", "EXPIRED", "DID_CHANGE_RENEWAL_STATUS"].enumerated() {
                let signed = now.addingTimeInterval(Double(120 + index))
                let txn = try fx.transaction(
                    id: "S1", product: Self.product, purchase: now, expires: month, token: nil, signed: signed, ownership: "FAMILY_SHARED")
                #expect(
                    try await client.appleNotify(try fx.notification(type, signed: signed, transaction: txn)).json(ReceivedBody.self).outcome
                        == "ignored")
            }
            let ownFails = try fx.transaction(
                id: "O1", product: "com.yourapp.basic.monthly", purchase: now, expires: month, token: memberID, signed: now.addingTimeInterval(200))
            let failed = try await client.appleNotify(
                try fx.notification("DID_FAIL_TO_RENEW", signed: now.addingTimeInterval(200), transaction: ownFails))
            #expect(try failed.json(ReceivedBody.self).outcome == "applied")
            #expect(try await Self.subscription(client, member).status == "past_due")
            let lateRevoke = try fx.transaction(
                id: "S1", product: Self.product, purchase: now, expires: month, token: nil, signed: now.addingTimeInterval(300),
                revoked: now.addingTimeInterval(300), ownership: "FAMILY_SHARED")
            let revoked2 = try await client.appleNotify(try fx.notification("REVOKE", signed: now.addingTimeInterval(300), transaction: lateRevoke))
            #expect(try revoked2.json(ReceivedBody.self).outcome == "ignored")
            state = try await Self.subscription(client, member)
            #expect(state.planId == "basic_monthly" && state.status == "past_due")
            #expect(try await client.balance(member).subscriptionTokens == tokens)
        }
    }

    @Test("a plan with familySharedTokens grants its tokens to family members too", arguments: TestDatabase.engines)
    func planMayShareTokens(engine: Engine) async throws {
        let fx = try BillingFixture()
        let plans = FileManager.default.temporaryDirectory.appendingPathComponent("plans-shared-\(UUID().uuidString).json")
        var catalog = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: repositoryRoot.appendingPathComponent("plans.json"))) as? [String: Any])
        var list = try #require(catalog["plans"] as? [[String: Any]])
        for index in list.indices where list[index]["id"] as? String == "pro_monthly" { list[index]["familySharedTokens"] = true }
        catalog["plans"] = list
        try JSONSerialization.data(withJSONObject: catalog).write(to: plans)
        defer { try? FileManager.default.removeItem(at: plans) }
        try await TestApp.run(
            engine,
            configure: { config in
                fx.configure(&config)
                config.plansFile = plans.path
            }
        ) { client, app in
            let member = try await client.signUpAndVerify(app, email: "fs-tokens@example.com")
            let now = app.clock.now()
            let shared = try fx.transaction(
                id: "T1", product: Self.product, purchase: now, expires: now.addingTimeInterval(30 * 86400), token: nil, ownership: "FAMILY_SHARED")
            #expect(try await client.appleVerify(member, shared).json(VerifyBody.self).outcome == "applied")
            #expect(try await Self.subscription(client, member).familyShared)
            #expect(try await client.balance(member).subscriptionTokens > 0)
        }
    }
}
