import Clock
import Crypto
import Entitlements
import Foundation
import SafeJSON
import Storage
import SwiftASN1
@_spi(FixedExpiryValidationTime) import X509

/// The App Store environments a server can be configured for. Xcode and local-testing payloads are unsigned
/// and never accepted.
public enum AppleEnvironment: String, Sendable, Codable {
    case production = "Production"
    case sandbox = "Sandbox"
}

/// Why a signed Apple payload was refused. Every case is the sender's fault (400), never ours.
public enum AppleVerificationError: Error, Equatable, Sendable {
    case format(String)
    case certificate(String)
    case signature
    case appIdentifier(String)
    case environment(String)

    public var detail: String {
        switch self {
        case .format(let why): "The signed payload is malformed: \(why)."
        case .certificate(let why): "The signing certificate chain is not trusted: \(why)."
        case .signature: "The signature does not match the payload."
        case .appIdentifier(let why): "The payload is for another app: \(why)."
        case .environment(let why): "The payload is for another App Store environment: \(why)."
        }
    }
}

/// What the server accepts from Apple.
public struct AppleConfig: Sendable {
    public let rootCertificates: [Certificate]
    public let bundleID: String
    public let appAppleID: Int64?
    public let environment: AppleEnvironment
    /// A production server that also accepts sandbox payloads (App Review tests production builds in sandbox).
    public let acceptSandbox: Bool

    public init(rootCertificates: [Certificate], bundleID: String, appAppleID: Int64?, environment: AppleEnvironment, acceptSandbox: Bool) {
        self.rootCertificates = rootCertificates
        self.bundleID = bundleID
        self.appAppleID = appAppleID
        self.environment = environment
        self.acceptSandbox = acceptSandbox
    }

    /// Reads PEM or DER certificates from files.
    public static func loadCertificates(paths: [String]) throws -> [Certificate] {
        try paths.map { path in
            guard let data = FileManager.default.contents(atPath: path) else { throw AppleVerificationError.certificate("cannot read \(path)") }
            if let text = String(data: data, encoding: .utf8), text.contains("-----BEGIN CERTIFICATE-----") {
                return try Certificate(pemEncoded: text)
            }
            return try Certificate(derEncoded: Array(data))
        }
    }
}

/// A StoreKit 2 transaction (`JWSTransactionDecodedPayload`), the fields this service uses.
public struct AppleTransaction: Codable, Sendable, Equatable {
    public let transactionId: String
    public let originalTransactionId: String
    public let bundleId: String
    public let productId: String
    public let purchaseDate: Int64
    public let expiresDate: Int64?
    public let type: String?
    public let quantity: Int?
    public let appAccountToken: String?
    public let inAppOwnershipType: String?
    /// A family member's access through Family Sharing (`inAppOwnershipType` FAMILY_SHARED), not the purchaser's own.
    public var isFamilyShared: Bool { inAppOwnershipType == "FAMILY_SHARED" }
    public let environment: String
    public let signedDate: Int64?
    public let revocationDate: Int64?
    public let revocationReason: Int?
    /// Refunded share in thousandths of a percent (100000 = all of it).
    public let revocationPercentage: Int?
    public let offerType: Int?
    public let price: Int64?
    public let transactionReason: String?

    public init(
        transactionId: String, originalTransactionId: String, bundleId: String, productId: String, purchaseDate: Int64, expiresDate: Int64? = nil,
        type: String? = nil, quantity: Int? = nil, appAccountToken: String? = nil, inAppOwnershipType: String? = nil, environment: String,
        signedDate: Int64? = nil, revocationDate: Int64? = nil, revocationReason: Int? = nil, revocationPercentage: Int? = nil, offerType: Int? = nil,
        price: Int64? = nil, transactionReason: String? = nil
    ) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.bundleId = bundleId
        self.productId = productId
        self.purchaseDate = purchaseDate
        self.expiresDate = expiresDate
        self.type = type
        self.quantity = quantity
        self.appAccountToken = appAccountToken
        self.inAppOwnershipType = inAppOwnershipType
        self.environment = environment
        self.signedDate = signedDate
        self.revocationDate = revocationDate
        self.revocationReason = revocationReason
        self.revocationPercentage = revocationPercentage
        self.offerType = offerType
        self.price = price
        self.transactionReason = transactionReason
    }
}

/// `JWSRenewalInfoDecodedPayload`, the fields this service uses.
public struct AppleRenewalInfo: Codable, Sendable, Equatable {
    public let originalTransactionId: String?
    public let productId: String?
    public let autoRenewProductId: String?
    public let autoRenewStatus: Int?
    public let gracePeriodExpiresDate: Int64?
    public let isInBillingRetryPeriod: Bool?
    public let expirationIntent: Int?
    public let environment: String
    public let signedDate: Int64?

    public init(
        originalTransactionId: String? = nil, productId: String? = nil, autoRenewProductId: String? = nil, autoRenewStatus: Int? = nil,
        gracePeriodExpiresDate: Int64? = nil, isInBillingRetryPeriod: Bool? = nil, expirationIntent: Int? = nil, environment: String,
        signedDate: Int64? = nil
    ) {
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.autoRenewProductId = autoRenewProductId
        self.autoRenewStatus = autoRenewStatus
        self.gracePeriodExpiresDate = gracePeriodExpiresDate
        self.isInBillingRetryPeriod = isInBillingRetryPeriod
        self.expirationIntent = expirationIntent
        self.environment = environment
        self.signedDate = signedDate
    }
}

/// `ResponseBodyV2DecodedPayload` with its nested JWSs verified and decoded.
public struct AppleNotification: Sendable, Equatable {
    public let notificationType: String
    public let subtype: String?
    public let notificationUUID: String
    public let signedDate: Int64
    public let environment: AppleEnvironment
    public let transaction: AppleTransaction?
    public let renewalInfo: AppleRenewalInfo?
}

/// Verifies App Store signed data the way Apple's app-store-server-library does, offline: compact JWS with
/// `alg` ES256 only, exactly three `x5c` certificates of which the third is ignored, the leaf → intermediate
/// chain validated against the configured roots at the payload's `signedDate` with Apple's two marker OIDs,
/// the signature checked with the leaf's P-256 key, then the app identity and environment.
public struct AppleSignedDataVerifier: Sendable {
    public let config: AppleConfig
    /// Validity is checked at the payload's signing time, or at this clock's now when it names none.
    public let clock: any TimeSource

    public static let leafMarkerOID: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 11, 1]
    public static let intermediateMarkerOID: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 2, 1]
    static let maxSegmentBytes = 64 * 1024

    public init(config: AppleConfig, clock: any TimeSource = SystemTimeSource()) {
        self.config = config
        self.clock = clock
    }

    /// A signed transaction (`signedTransaction` from the device, or `signedTransactionInfo`).
    public func verifyTransaction(_ jws: String) async throws(AppleVerificationError) -> (AppleTransaction, AppleEnvironment) {
        let transaction: AppleTransaction = try await verified(jws)
        guard transaction.bundleId == config.bundleID else { throw .appIdentifier("bundleId '\(transaction.bundleId)'") }
        return (transaction, try acceptedEnvironment(transaction.environment))
    }

    public func verifyRenewalInfo(_ jws: String) async throws(AppleVerificationError) -> AppleRenewalInfo {
        let info: AppleRenewalInfo = try await verified(jws)
        _ = try acceptedEnvironment(info.environment)
        return info
    }

    /// A notification's `signedPayload`, with `signedTransactionInfo` and `signedRenewalInfo` verified too.
    public func verifyNotification(_ jws: String) async throws(AppleVerificationError) -> AppleNotification {
        let payload: NotificationPayload = try await verified(jws)
        guard let data = payload.data ?? payload.summary ?? payload.appData else { throw .format("no data, summary or appData") }
        guard data.bundleId == config.bundleID else { throw .appIdentifier("bundleId '\(data.bundleId ?? "")'") }
        let environment = try acceptedEnvironment(data.environment ?? "")
        if environment == .production, let expected = config.appAppleID, data.appAppleId != expected {
            throw .appIdentifier("appAppleId \(data.appAppleId.map(String.init) ?? "missing")")
        }
        var transaction: AppleTransaction?
        if let signed = data.signedTransactionInfo {
            let (decoded, nestedEnvironment) = try await verifyTransaction(signed)
            guard nestedEnvironment == environment else { throw .environment("the transaction's environment differs from the notification's") }
            transaction = decoded
        }
        let renewal = try await data.signedRenewalInfo.asyncMap { signed throws(AppleVerificationError) in try await verifyRenewalInfo(signed) }
        return AppleNotification(
            notificationType: payload.notificationType, subtype: payload.subtype, notificationUUID: payload.notificationUUID,
            signedDate: payload.signedDate, environment: environment, transaction: transaction, renewalInfo: renewal)
    }

    func acceptedEnvironment(_ raw: String) throws(AppleVerificationError) -> AppleEnvironment {
        guard let environment = AppleEnvironment(rawValue: raw) else { throw .environment("'\(raw)' is not accepted") }
        if environment == config.environment { return environment }
        if config.environment == .production && config.acceptSandbox && environment == .sandbox { return environment }
        throw .environment("'\(raw)' but this server expects \(config.environment.rawValue)")
    }

    struct Header: Decodable { let alg: String?; let x5c: [String]? }
    /// Every date a payload of Apple's may carry; each must lie in ``ProviderDates/milliseconds``.
    struct PayloadDates: Decodable {
        let signedDate, purchaseDate, originalPurchaseDate, expiresDate, revocationDate: Int64?
        let gracePeriodExpiresDate, renewalDate, recentSubscriptionStartDate: Int64?
        var named: [(String, Int64?)] {
            [
                ("signedDate", signedDate), ("purchaseDate", purchaseDate), ("originalPurchaseDate", originalPurchaseDate),
                ("expiresDate", expiresDate), ("revocationDate", revocationDate), ("gracePeriodExpiresDate", gracePeriodExpiresDate),
                ("renewalDate", renewalDate), ("recentSubscriptionStartDate", recentSubscriptionStartDate),
            ]
        }
    }
    struct NotificationPayload: Decodable {
        let notificationType: String
        let subtype: String?
        let notificationUUID: String
        let signedDate: Int64
        let data: NotificationData?
        let summary: NotificationData?
        let appData: NotificationData?
    }
    struct NotificationData: Decodable {
        let environment: String?
        let appAppleId: Int64?
        let bundleId: String?
        let signedTransactionInfo: String?
        let signedRenewalInfo: String?
    }

    /// The JWS checks shared by every payload type; returns the decoded payload.
    func verified<Payload: Decodable>(_ jws: String) async throws(AppleVerificationError) -> Payload {
        let parts = jws.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .format("a compact JWS has three parts") }
        guard parts.allSatisfy({ $0.utf8.count <= Self.maxSegmentBytes }) else { throw .format("a part is too large") }
        guard let headerData = Self.base64URLDecode(parts[0]), let payloadData = Self.base64URLDecode(parts[1]),
            let signatureData = Self.base64URLDecode(parts[2])
        else { throw .format("a part is not base64url") }
        guard let header = try? UntrustedJSON.decode(Header.self, from: headerData) else { throw .format("the header is not JSON") }
        guard header.alg == "ES256" else { throw .format("alg must be ES256") }
        guard let x5c = header.x5c, x5c.count == 3 else { throw .format("x5c must hold exactly three certificates") }
        let payload: Payload
        do { payload = try UntrustedJSON.decode(Payload.self, from: payloadData) } catch { throw .format("the payload is not the expected JSON") }
        let dates: PayloadDates
        do { dates = try UntrustedJSON.decode(PayloadDates.self, from: payloadData) } catch {
            throw .format("a date is not a whole number of milliseconds")
        }
        // Checked before the signing time reaches swift-certificates, whose GeneralizedTime traps outside the years 0–9999.
        if let name = ProviderDates.firstOutside(ProviderDates.milliseconds, dates.named) { throw .format("\(name) is out of range (1970 to 2100)") }
        let signedDate = dates.signedDate
        let leaf = try Self.certificate(x5c[0])
        let intermediate = try Self.certificate(x5c[1])
        // Validity at the payload's signing time (offline verification, as Apple's library without OCSP).
        let validationTime = signedDate.map { Date(timeIntervalSince1970: Double($0) / 1000) } ?? clock.now()
        var verifier = Verifier(rootCertificates: CertificateStore(config.rootCertificates)) {
            RFC5280Policy(fixedExpiryValidationTime: validationTime)
            AppleMarkerOIDPolicy()
        }
        let result = await verifier.validate(leaf: leaf, intermediates: CertificateStore([intermediate]))
        guard case .validCertificate = result else {
            if case .couldNotValidate(let failures) = result, let first = failures.first {
                throw .certificate(first.policyFailureReason.description)
            }
            throw .certificate("no chain to a configured root")
        }
        guard let key = P256.Signing.PublicKey(leaf.publicKey) else { throw .certificate("the signing key is not P-256") }
        guard let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureData),
            key.isValidSignature(signature, for: Data("\(parts[0]).\(parts[1])".utf8))
        else { throw .signature }
        return payload
    }

    static func certificate(_ base64: String) throws(AppleVerificationError) -> Certificate {
        guard base64.utf8.count <= maxSegmentBytes, let der = Data(base64Encoded: base64) else { throw .format("an x5c entry is not base64 DER") }
        do { return try Certificate(derEncoded: Array(der)) } catch { throw .format("an x5c entry is not a certificate") }
    }

    static func base64URLDecode(_ part: Substring) -> Data? {
        var text = part.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.utf8.count % 4 != 0 { text += "=" }
        return Data(base64Encoded: text)
    }
}

/// Apple's marker extensions: the intermediate carries 1.2.840.113635.100.6.2.1, the leaf
/// 1.2.840.113635.100.6.11.1, and the chain is exactly leaf → intermediate → root.
struct AppleMarkerOIDPolicy: VerifierPolicy {
    let verifyingCriticalExtensions: [ASN1ObjectIdentifier] = []

    mutating func chainMeetsPolicyRequirements(chain: UnverifiedCertificateChain) async -> PolicyEvaluationResult {
        guard chain.count == 3 else { return .failsToMeetPolicy(reason: "the chain must be leaf, intermediate, root") }
        guard chain[0].extensions[oid: AppleSignedDataVerifier.leafMarkerOID] != nil else {
            return .failsToMeetPolicy(reason: "the leaf lacks Apple's receipt-signing OID")
        }
        guard chain[1].extensions[oid: AppleSignedDataVerifier.intermediateMarkerOID] != nil else {
            return .failsToMeetPolicy(reason: "the intermediate lacks Apple's WWDR OID")
        }
        return .meetsPolicy
    }
}

extension Optional {
    func asyncMap<T, E: Error>(_ transform: (Wrapped) async throws(E) -> T) async throws(E) -> T? {
        guard let self else { return nil }
        return try await transform(self)
    }
}
