import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import JWTKit
import NIOCore
import Synchronization

/// A local App Store Server API: checks each call's ES256 bearer token with the test key (kid, iss, aud, bid), serves
/// scripted signed transactions, records consumption answers, and answers scripted failures first (429, 5xx).
final class AppStoreMock: Sendable {
    static let keyID = "TESTKEY123"
    static let issuerID = "57246542-96fe-1a63-e053-0824d011072a"

    let key = P256.Signing.PrivateKey()
    let bundleID: String
    let history = Mutex<[String: [String]]>([:])
    let refunds = Mutex<[String: [String]]>([:])
    let consumption = Mutex<[(String, ConsumptionBody)]>([])
    let script = Mutex<[Int]>([])
    let calls = Mutex<[String]>([])
    let refusedTokens = Mutex(0)
    /// Runs (once) when the named call arrives, before it is answered: what happens on the service meanwhile.
    let during = Mutex<(name: String, work: @Sendable () async -> Void)?>(nil)

    struct ConsumptionBody: Decodable, Sendable, Equatable {
        let customerConsented: Bool
        let sampleContentProvided: Bool
        let deliveryStatus: String
        let consumptionPercentage: Int?
        let refundPreference: String?
    }

    init(bundleID: String) { self.bundleID = bundleID }

    var keyPEM: String { key.pemRepresentation }

    struct Claims: JWTPayload {
        let iss: IssuerClaim
        let aud: AudienceClaim
        let exp: ExpirationClaim
        let bid: String
        func verify(using algorithm: some JWTAlgorithm) async throws { try exp.verifyNotExpired() }
    }

    func authorized(_ request: Request) async -> Bool {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else { return false }
        guard let publicKey = try? ES256PublicKey(backing: key.publicKey) else { return false }
        let keys = await JWTKeyCollection().add(ecdsa: publicKey, kid: JWKIdentifier(string: Self.keyID))
        guard let claims = try? await keys.verify(String(header.dropFirst(7)), as: Claims.self) else { return false }
        return claims.iss.value == Self.issuerID && claims.aud.value == ["appstoreconnect-v1"] && claims.bid == bundleID
    }

    /// The scripted status for this call (nil: answer normally), after the token check.
    func gate(_ request: Request, _ name: String) async -> Response? {
        calls.withLock { $0.append(name) }
        if let work = during.withLock({ hook -> (@Sendable () async -> Void)? in
            guard let found = hook, found.name == name else { return nil }
            hook = nil
            return found.work
        }) {
            await work()
        }
        guard await authorized(request) else {
            refusedTokens.withLock { $0 += 1 }
            return Self.json(#"{"errorCode":4010000,"errorMessage":"Unauthenticated"}"#, status: .unauthorized)
        }
        guard let status = script.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) else { return nil }
        var response = Self.json(#"{"errorCode":\#(status * 10000),"errorMessage":"scripted"}"#, status: .init(code: status))
        if status == 429 { response.headers[HTTPField.Name("Retry-After")!] = "0" }
        return response
    }

    static func json(_ text: String, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    static func page(_ items: [String], revision: String?, more: Bool) -> Response {
        let list = items.map { "\"\($0)\"" }.joined(separator: ",")
        return json(#"{"signedTransactions":[\#(list)],"revision":\#(revision.map { "\"\($0)\"" } ?? "null"),"hasMore":\#(more)}"#)
    }

    func run(_ body: @Sendable (String) async throws -> Void) async throws {
        let router = Router()
        router.get("/inApps/v2/history/:id") { request, context -> Response in
            if let refusal = await self.gate(request, "history") { return refusal }
            let all = self.history.withLock { $0[context.parameters.get("id") ?? ""] ?? [] }
            // Two pages when there are two or more transactions: the first, then the rest after revision "2".
            if request.uri.queryParameters.get("revision") == "2" { return Self.page(Array(all.dropFirst()), revision: "3", more: false) }
            return Self.page(Array(all.prefix(1)), revision: "2", more: all.count > 1)
        }
        router.get("/inApps/v2/refund/lookup/:id") { request, context -> Response in
            if let refusal = await self.gate(request, "refunds") { return refusal }
            return Self.page(self.refunds.withLock { $0[context.parameters.get("id") ?? ""] ?? [] }, revision: "r", more: false)
        }
        router.get("/inApps/v1/subscriptions/:id") { request, context -> Response in
            if let refusal = await self.gate(request, "statuses") { return refusal }
            let id = context.parameters.get("id") ?? ""
            guard let last = self.history.withLock({ $0[id]?.last }) else {
                return Self.json(#"{"environment":"Sandbox","bundleId":"\#(self.bundleID)","data":[]}"#)
            }
            return Self.json(
                #"{"environment":"Sandbox","bundleId":"\#(self.bundleID)","data":[{"subscriptionGroupIdentifier":"g1","lastTransactions":[{"originalTransactionId":"\#(id)","status":1,"signedTransactionInfo":"\#(last)"}]}]}"#
            )
        }
        router.get("/inApps/v1/lookup/:order") { request, context -> Response in
            if let refusal = await self.gate(request, "lookup") { return refusal }
            let found = self.history.withLock { $0[context.parameters.get("order") ?? ""] }
            return Self.json(
                #"{"status":\#(found == nil ? 1 : 0),"signedTransactions":[\#((found ?? []).map { "\"\($0)\"" }.joined(separator: ","))]}"#)
        }
        router.put("/inApps/v2/transactions/consumption/:id") { request, context -> Response in
            if let refusal = await self.gate(request, "consumption") { return refusal }
            let buffer = try await request.body.collect(upTo: 1 << 16)
            guard let fields = try? JSONDecoder().decode(ConsumptionBody.self, from: Data(buffer.readableBytesView)) else {
                return Self.json(#"{"errorCode":4000023,"errorMessage":"Invalid request"}"#, status: .badRequest)
            }
            self.consumption.withLock { $0.append((context.parameters.get("id") ?? "", fields)) }
            return Response(status: .accepted)
        }
        router.put("/inApps/v1/subscriptions/extend/:id") { request, context -> Response in
            if let refusal = await self.gate(request, "extend") { return refusal }
            let id = context.parameters.get("id") ?? ""
            return Self.json(#"{"originalTransactionId":"\#(id)","webOrderLineItemId":"w1","success":true,"effectiveDate":1700000000000}"#)
        }
        try await withLocalServer(router, body)
    }
}
