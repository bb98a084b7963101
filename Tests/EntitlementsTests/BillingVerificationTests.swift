import Crypto
import Entitlements
import Foundation
import SwiftASN1
import Testing
@_spi(FixedExpiryValidationTime) import X509

@testable import Billing
@testable import TestSupport

@Suite("Apple signed data and Stripe signatures")
struct BillingVerificationTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let bundle = "com.example.app"
    static let nowMs = Int64(Date().timeIntervalSince1970 * 1000)

    static func verifier(
        _ chain: AppleTestChain, environment: AppleEnvironment = .sandbox, acceptSandbox: Bool = false, appID: Int64? = 1234
    )
        -> AppleSignedDataVerifier
    {
        AppleSignedDataVerifier(
            config: AppleConfig(
                rootCertificates: [chain.root], bundleID: bundle, appAppleID: appID, environment: environment, acceptSandbox: acceptSandbox))
    }

    static func transaction(environment: String = "Sandbox", bundle: String = bundle, signedDate: Int64 = nowMs) -> [String: any Sendable] {
        [
            "transactionId": "2000000001", "originalTransactionId": "2000000001", "bundleId": bundle, "productId": "com.yourapp.tokens.25",
            "purchaseDate": signedDate, "type": "Consumable", "environment": environment, "signedDate": signedDate, "quantity": 1,
        ]
    }

    func rejects(_ verifier: AppleSignedDataVerifier, _ jws: String) async -> AppleVerificationError? {
        do {
            _ = try await verifier.verifyTransaction(jws)
            return nil
        } catch { return error }
    }

    @Test("a well-signed transaction verifies and decodes; x5c[2] is ignored in favour of the configured root")
    func accepts() async throws {
        let chain = try AppleTestChain()
        let (transaction, environment) = try await Self.verifier(chain).verifyTransaction(try chain.sign(json: Self.transaction()))
        #expect(transaction.transactionId == "2000000001")
        #expect(transaction.productId == "com.yourapp.tokens.25")
        #expect(environment == .sandbox)
        // Another root in x5c[2] changes nothing: the trust anchor is the configured one.
        let stranger = try AppleTestChain(rootName: "Stranger")
        let swapped = try chain.sign(json: Self.transaction(), x5c: [chain.leaf, chain.intermediate, stranger.root])
        #expect(try await Self.verifier(chain).verifyTransaction(swapped).0.transactionId == "2000000001")
    }

    @Test("tampered payload or signature, alg none/HS256, two certificates, malformed input are refused")
    func structure() async throws {
        let chain = try AppleTestChain()
        let verifier = Self.verifier(chain)
        let good = try chain.sign(json: Self.transaction())
        let parts = good.split(separator: ".").map(String.init)
        var payload = Self.transaction()
        payload["productId"] = "com.yourapp.tokens.500"
        let forged =
            parts[0] + "." + AppleTestChain.base64URL(try JSONSerialization.data(withJSONObject: payload, options: [.sortedKeys])) + "." + parts[2]
        #expect(await rejects(verifier, forged) == .signature)
        var signature = Array(Data(base64Encoded: parts[2].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/") + "==")!)
        signature[10] ^= 0x01
        #expect(await rejects(verifier, parts[0] + "." + parts[1] + "." + AppleTestChain.base64URL(Data(signature))) == .signature)
        #expect(await rejects(verifier, try chain.sign(json: Self.transaction(), alg: "none")) == .format("alg must be ES256"))
        #expect(await rejects(verifier, try chain.sign(json: Self.transaction(), alg: "HS256")) == .format("alg must be ES256"))
        #expect(
            await rejects(verifier, try chain.sign(json: Self.transaction(), x5c: [chain.leaf, chain.intermediate]))
                == .format("x5c must hold exactly three certificates"))
        #expect(await rejects(verifier, parts[0] + "." + parts[1]) == .format("a compact JWS has three parts"))
        #expect(await rejects(verifier, "not a jws") == .format("a compact JWS has three parts"))
        // Signed by the leaf but the chain is presented as leaf, leaf, root: no path to the root.
        guard case .certificate = await rejects(verifier, try chain.sign(json: Self.transaction(), x5c: [chain.leaf, chain.leaf, chain.root])) else {
            Issue.record("a chain without the intermediate must fail")
            return
        }
    }

    @Test("the chain must reach the configured root, carry both Apple OIDs, and be valid when the payload was signed")
    func chainRules() async throws {
        let trusted = try AppleTestChain()
        let other = try AppleTestChain(rootName: "Other Root")
        // Signed by a chain to another root.
        guard case .certificate = await rejects(Self.verifier(trusted), try other.sign(json: Self.transaction())) else {
            Issue.record("another root must fail")
            return
        }
        let noLeafOID = try AppleTestChain(leafOID: false)
        #expect(
            await rejects(Self.verifier(noLeafOID), try noLeafOID.sign(json: Self.transaction()))
                == .certificate("the leaf lacks Apple's receipt-signing OID"))
        let noIntermediateOID = try AppleTestChain(intermediateOID: false)
        #expect(
            await rejects(Self.verifier(noIntermediateOID), try noIntermediateOID.sign(json: Self.transaction()))
                == .certificate("the intermediate lacks Apple's WWDR OID"))
        // A leaf that expired yesterday: payloads signed now fail; one signed while it was valid still verifies.
        let expired = try AppleTestChain(leafValidity: Date(timeIntervalSinceNow: -86400 * 400)...Date(timeIntervalSinceNow: -86400))
        guard case .certificate = await rejects(Self.verifier(expired), try expired.sign(json: Self.transaction())) else {
            Issue.record("an expired leaf must fail")
            return
        }
        let earlier = Self.nowMs - 86400 * 1000 * 10
        #expect(await rejects(Self.verifier(expired), try expired.sign(json: Self.transaction(signedDate: earlier))) == nil)
    }

    @Test("bundle id, environment and (Production) appAppleId are checked, also on nested payloads")
    func identity() async throws {
        let chain = try AppleTestChain()
        #expect(
            await rejects(Self.verifier(chain), try chain.sign(json: Self.transaction(bundle: "com.other.app")))
                == .appIdentifier("bundleId 'com.other.app'"))
        #expect(
            await rejects(Self.verifier(chain, environment: .production), try chain.sign(json: Self.transaction(environment: "Sandbox")))
                == .environment("'Sandbox' but this server expects Production"))
        #expect(
            await rejects(Self.verifier(chain), try chain.sign(json: Self.transaction(environment: "Xcode")))
                == .environment("'Xcode' is not accepted"))
        // App Review: a production server that accepts sandbox marks the payload as sandbox.
        let (_, environment) = try await Self.verifier(chain, environment: .production, acceptSandbox: true)
            .verifyTransaction(try chain.sign(json: Self.transaction(environment: "Sandbox")))
        #expect(environment == .sandbox)

        let nested = try chain.sign(json: Self.transaction(environment: "Production"))
        func notification(appID: Int, nestedJWS: String) throws -> String {
            try chain.sign(json: [
                "notificationType": "ONE_TIME_CHARGE", "notificationUUID": UUID().uuidString, "signedDate": Self.nowMs, "version": "2.0",
                "data": ["environment": "Production", "appAppleId": appID, "bundleId": Self.bundle, "signedTransactionInfo": nestedJWS]
                    as [String: any Sendable],
            ])
        }
        let production = Self.verifier(chain, environment: .production)
        let decoded = try await production.verifyNotification(try notification(appID: 1234, nestedJWS: nested))
        #expect(decoded.transaction?.transactionId == "2000000001")
        await #expect(throws: AppleVerificationError.appIdentifier("appAppleId 99")) {
            _ = try await production.verifyNotification(try notification(appID: 99, nestedJWS: nested))
        }
        // The nested transaction is verified too: one signed by another chain fails the whole notification.
        let forgedNested = try AppleTestChain(rootName: "Other").sign(json: Self.transaction(environment: "Production"))
        await #expect(throws: AppleVerificationError.self) {
            _ = try await production.verifyNotification(try notification(appID: 1234, nestedJWS: forgedNested))
        }
    }

    @Test("Apple's real certificates: the WWDR G6 intermediate and receipt-signing leaf validate to Apple Root CA - G3 with their OIDs")
    func realAppleChain() async throws {
        let dir = Self.repository.appendingPathComponent("resources/apple-certs")
        let certificates = try AppleConfig.loadCertificates(
            paths: ["AppleRootCA-G3.pem", "AppleWWDRCAG6.pem", "apple-receipt-signing-leaf.pem"].map {
                dir.appendingPathComponent($0).path
            })
        let (root, intermediate, leaf) = (certificates[0], certificates[1], certificates[2])
        #expect(leaf.extensions[oid: AppleSignedDataVerifier.leafMarkerOID] != nil)
        #expect(intermediate.extensions[oid: AppleSignedDataVerifier.intermediateMarkerOID] != nil)
        #expect(P256.Signing.PublicKey(leaf.publicKey) != nil)
        let digest = SHA256.hash(data: try AppleTestChain.der(root)).map { String(format: "%02x", $0) }.joined()
        #expect(digest == "63343abfb89a6a03ebb57e9b3f5fa7be7c4f5c756f3017b3a8c488c3653e9179")
        let during = Date(timeIntervalSince1970: 1_761_962_975)  // Oct 2025, inside the leaf's validity (the library's fixture date)
        var verifier = Verifier(rootCertificates: CertificateStore([root])) {
            RFC5280Policy(fixedExpiryValidationTime: during)
            AppleMarkerOIDPolicy()
        }
        guard case .validCertificate(let path) = await verifier.validate(leaf: leaf, intermediates: CertificateStore([intermediate])) else {
            Issue.record("Apple's chain must validate to the G3 root")
            return
        }
        #expect(path.count == 3)
        // Not to a test root.
        var stranger = Verifier(rootCertificates: CertificateStore([try AppleTestChain().root])) {
            RFC5280Policy(fixedExpiryValidationTime: during)
            AppleMarkerOIDPolicy()
        }
        guard case .couldNotValidate = await stranger.validate(leaf: leaf, intermediates: CertificateStore([intermediate])) else {
            Issue.record("Apple's chain must not validate to another root")
            return
        }
    }

    @Test("Stripe-Signature: raw body HMAC, any v1 and any configured secret, ±300 s, constant-time match")
    func stripe() throws {
        let body = Array(#"{"id":"evt_1","type":"invoice.paid"}"#.utf8)
        let now = Date()
        let t = Int64(now.timeIntervalSince1970)
        let verifier = StripeSignatureVerifier(secrets: ["whsec_old_secret_0123", "whsec_new_secret_4567"])
        #expect(
            try verifier.verify(
                rawBody: body, header: StripeSignatureVerifier.header(rawBody: body, secret: "whsec_new_secret_4567", timestamp: t), now: now) == t)
        // Several v1 values (rotation on Stripe's side): any one may match; v0 is ignored.
        let good = StripeSignatureVerifier.header(rawBody: body, secret: "whsec_old_secret_0123", timestamp: t)
        let multi = "t=\(t),v0=\(String(repeating: "0", count: 64)),v1=\(String(repeating: "a", count: 64)),\(good.split(separator: ",")[1])"
        #expect(throws: Never.self) { try verifier.verify(rawBody: body, header: multi, now: now) }
        #expect(throws: StripeSignatureError.noMatchingSignature) {
            try verifier.verify(
                rawBody: body, header: StripeSignatureVerifier.header(rawBody: body, secret: "whsec_wrong_secret_89", timestamp: t), now: now)
        }
        // A re-serialized body (spaces added) no longer matches.
        let reserialized = Array(#"{"id": "evt_1", "type": "invoice.paid"}"#.utf8)
        #expect(throws: StripeSignatureError.noMatchingSignature) { try verifier.verify(rawBody: reserialized, header: good, now: now) }
        #expect(throws: StripeSignatureError.staleTimestamp(ageSeconds: 301)) {
            try verifier.verify(
                rawBody: body, header: StripeSignatureVerifier.header(rawBody: body, secret: "whsec_new_secret_4567", timestamp: t - 301), now: now)
        }
        #expect(throws: StripeSignatureError.staleTimestamp(ageSeconds: -301)) {
            try verifier.verify(
                rawBody: body, header: StripeSignatureVerifier.header(rawBody: body, secret: "whsec_new_secret_4567", timestamp: t + 301), now: now)
        }
        #expect(throws: StripeSignatureError.missingHeader) { try verifier.verify(rawBody: body, header: nil, now: now) }
        #expect(throws: StripeSignatureError.malformedHeader) { try verifier.verify(rawBody: body, header: "t=\(t)", now: now) }
        #expect(throws: StripeSignatureError.malformedHeader) { try verifier.verify(rawBody: body, header: "v1=abc,t=x", now: now) }
    }
}
