import Billing
import Foundation

/// The App Store Server API (outbound): the In-App Purchase key, where Apple's API is, how CONSUMPTION_REQUESTs are
/// answered, how often purchases are reconciled, and the key that signs StoreKit offers.
struct AppleAPISettings: Sendable {
    var keyID: String
    var issuerID: String
    var privateKeyPath: String
    /// `APPLE_API_BASE_URL`; default Apple's production or sandbox URL by `APPLE_ENVIRONMENT`.
    var baseURL: String?
    var offerKeyID: String
    var offerKeyPath: String
    var consumption = AppleConsumptionPolicy()
    /// `APPLE_RECONCILE_EVERY` (`6h`, `1d`; off by default): each account with Apple purchases is compared with Apple's
    /// records this often.
    var reconcileEverySeconds: Double?
    /// How often the worker looks for CONSUMPTION_REQUESTs to answer.
    var pollSeconds: Double = 10
    /// `APPLE_API_TIMEOUT_SECONDS`: each try's timeout (a call's tries end within twice it).
    var timeoutSeconds: Double = 10
}

extension AppConfig {
    mutating func readAppleAPI(_ reader: inout EnvironmentReader) {
        let keys = ["APPLE_API_KEY_ID", "APPLE_API_ISSUER_ID", "APPLE_API_PRIVATE_KEY_FILE"]
        let given = keys.compactMap { reader.value($0) }
        guard !given.isEmpty else { return }
        guard given.count == keys.count, let keyID = reader.value(keys[0]), let issuer = reader.value(keys[1]), let path = reader.value(keys[2])
        else {
            reader.problems.append("the App Store Server API needs APPLE_API_KEY_ID, APPLE_API_ISSUER_ID and APPLE_API_PRIVATE_KEY_FILE together")
            return
        }
        if apple == nil { reader.problems.append("the App Store Server API needs Apple billing configured (APPLE_BUNDLE_ID, APPLE_ENVIRONMENT …)") }
        var settings = AppleAPISettings(
            keyID: keyID, issuerID: issuer, privateKeyPath: path, offerKeyID: reader.value("APPLE_OFFER_KEY_ID") ?? keyID,
            offerKeyPath: reader.value("APPLE_OFFER_PRIVATE_KEY_FILE") ?? path)
        if let url = reader.value("APPLE_API_BASE_URL") {
            if url.hasPrefix("https://") || url.hasPrefix("http://") {
                settings.baseURL = url
            } else {
                reader.problems.append("APPLE_API_BASE_URL must be an http(s) URL")
            }
        }
        if let flag = reader.flag("APPLE_SAMPLE_CONTENT_PROVIDED") { settings.consumption.sampleContentProvided = flag }
        if let raw = reader.value("APPLE_REFUND_PREFERENCE") {
            if let preference = AppleConsumptionPolicy.Preference(rawValue: raw) {
                settings.consumption.preference = preference
            } else {
                reader.problems.append("APPLE_REFUND_PREFERENCE must be 'consumption' or 'none'")
            }
        }
        settings.reconcileEverySeconds = reader.duration("APPLE_RECONCILE_EVERY", 60...(30 * 86400)).map(Double.init)
        if let n = reader.number("APPLE_CONSUMPTION_POLL_SECONDS", 1...3600) { settings.pollSeconds = Double(n) }
        if let n = reader.number("APPLE_API_TIMEOUT_SECONDS", 1...60) { settings.timeoutSeconds = Double(n) }
        appleAPI = settings
    }
}
