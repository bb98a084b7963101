import Clock
import Crypto
import Entitlements
import Foundation
import Logging
import Storage

/// Signs StoreKit promotional and win-back offers as Apple specifies: ECDSA P-256 with SHA-256 over the bundle id, key
/// id, product id, offer id, the app account token and the nonce (both lower-case) and the timestamp (ms), joined by
/// U+2063; the signature DER, base64. The key is the In-App Purchase key (`APPLE_OFFER_KEY_ID`, `APPLE_OFFER_PRIVATE_KEY_FILE`,
/// by default the App Store Server API's).
public struct AppleOfferSigner: Sendable {
    let keyID: String
    let bundleID: String
    let key: P256.Signing.PrivateKey

    public init(keyID: String, bundleID: String, privateKeyPEM: String) throws(BillingError) {
        do { key = try P256.Signing.PrivateKey(pemRepresentation: privateKeyPEM) } catch {
            throw .notConfigured("APPLE_OFFER_PRIVATE_KEY_FILE is not a P-256 private key in PEM")
        }
        self.keyID = keyID
        self.bundleID = bundleID
    }

    public struct Signature: Sendable, Equatable {
        public let keyIdentifier: String
        public let nonce: String
        public let timestamp: Int64
        public let signature: String
        public let appAccountToken: String
    }

    /// The text Apple verifies the signature over.
    public static func payload(
        bundleID: String, keyID: String, productID: String, offerID: String, appAccountToken: String, nonce: String, timestamp: Int64
    )
        -> String
    {
        [bundleID, keyID, productID, offerID, appAccountToken.lowercased(), nonce.lowercased(), String(timestamp)].joined(separator: "\u{2063}")
    }

    public func sign(productID: String, offerID: String, appAccountToken: String, nonce: UUID, at: Date) throws -> Signature {
        let timestamp = Int64(at.timeIntervalSince1970 * 1000)
        let text = Self.payload(
            bundleID: bundleID, keyID: keyID, productID: productID, offerID: offerID, appAccountToken: appAccountToken, nonce: nonce.uuidString,
            timestamp: timestamp)
        let signature = try key.signature(for: Data(text.utf8))
        return Signature(
            keyIdentifier: keyID, nonce: nonce.uuidString.lowercased(), timestamp: timestamp,
            signature: signature.derRepresentation.base64EncodedString(),
            appAccountToken: appAccountToken.lowercased())
    }
}

/// Which offers an account may be offered.
public enum AppleOfferKind: String, Sendable {
    /// For customers who subscribe now or did before (a new customer gets StoreKit's introductory offer instead).
    case promotional
    /// For customers whose subscription lapsed: they had one and have none now.
    case winBack = "win_back"
}

extension BillingService {
    /// The signature for an eligible account (else `offerNotEligible` with the reason), timestamped by the service clock.
    public func signAppleOffer(
        _ signer: AppleOfferSigner, userID: String, productID: String, offerID: String, kind: AppleOfferKind, logger: Logger
    ) async throws -> AppleOfferSigner.Signature {
        if let refusal = try await appleOfferRefusal(userID: userID, productID: productID, offerID: offerID, kind: kind, logger: logger) {
            throw BillingError.offerNotEligible(refusal)
        }
        return try signer.sign(productID: productID, offerID: offerID, appAccountToken: userID, nonce: FreshID.value(), at: clock.now())
    }

    /// Whether the account may get offer `offerID` of `kind` for `productID`, and why not: the product must be one of the
    /// catalog's plans on Apple and the offer one the plan lists for that kind (`appleOffers`); promotional needs an Apple
    /// subscription now or before, win-back one before and none now.
    public func appleOfferRefusal(
        userID: String, productID: String, offerID: String, kind: AppleOfferKind, logger: Logger
    ) async throws -> String? {
        guard let plan = catalog.plans.first(where: { $0.appleProductId == productID }) else {
            return "'\(productID.prefix(100))' is not a subscription plan of this app"
        }
        let listed = (kind == .promotional ? plan.appleOffers?.promotional : plan.appleOffers?.winBack) ?? []
        guard listed.contains(offerID) else {
            return "'\(offerID.prefix(100))' is not one of the \(kind.rawValue) offers of '\(productID.prefix(100))'"
        }
        return try await database.withConnection(logger: logger) { tx in
            let hadApple =
                try await tx.first(
                    "SELECT source_id FROM billing_grants WHERE provider = 'apple' AND user_id = ? AND kind = 'period' LIMIT 1", [userID])
                != nil
            let current = try await machine.store.subscription(userID: userID, tx)
            let now = clock.now()
            let subscribedNow = current.map { $0.isEntitled(at: now) && catalog.plan(id: $0.planID)?.isFreeTier == false } ?? false
            switch kind {
            case .promotional:
                return hadApple || subscribedNow ? nil : "promotional offers are for customers who subscribe or subscribed on Apple"
            case .winBack:
                if subscribedNow { return "win-back offers are for customers without a subscription now" }
                return hadApple ? nil : "win-back offers are for customers who subscribed on Apple before"
            }
        }
    }
}
