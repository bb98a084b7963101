import Crypto
import Entitlements
import Foundation
import Storage

/// Why a Stripe webhook was refused (400, nothing applied).
public enum StripeSignatureError: Error, Equatable, Sendable {
    case missingHeader
    case malformedHeader
    case staleTimestamp(ageSeconds: Int64)
    case noMatchingSignature

    public var detail: String {
        switch self {
        case .missingHeader: "The Stripe-Signature header is missing."
        case .malformedHeader: "The Stripe-Signature header needs t=<unix seconds> and at least one v1=<hex> signature."
        case .staleTimestamp(let age):
            "The Stripe-Signature timestamp is \(age.magnitude) s \(age < 0 ? "in the future" : "old"); at most 300 s either way is accepted."
        case .noMatchingSignature: "No v1 signature matches the raw body with any configured webhook secret."
        }
    }
}

/// Stripe's webhook signature: `t=<unix>,v1=<hex>[,v1=…]`, where v1 = hex(HMAC-SHA256(secret, "<t>." + raw body)).
/// Any configured secret (rotation) and any v1 may match; compared in constant time; the timestamp must be within
/// `tolerance` seconds either way.
public struct StripeSignatureVerifier: Sendable {
    public static let tolerance: Int64 = 300
    let secrets: [SymmetricKey]

    public init(secrets: [String]) {
        self.secrets = secrets.map { SymmetricKey(data: Array($0.utf8)) }
    }

    /// Returns the signed timestamp.
    @discardableResult
    public func verify(rawBody: some DataProtocol, header: String?, now: Date) throws(StripeSignatureError) -> Int64 {
        guard let header, !header.isEmpty else { throw .missingHeader }
        var timestamp: Int64?
        var candidates: [[UInt8]] = []
        for item in header.split(separator: ",") {
            let pair = item.split(separator: "=", maxSplits: 1)
            guard pair.count == 2 else { continue }
            let key = pair[0].trimmingCharacters(in: .whitespaces)
            if key == "t" {
                timestamp = Int64(pair[1].trimmingCharacters(in: .whitespaces))
            } else if key == "v1", let bytes = Self.hexBytes(pair[1].trimmingCharacters(in: .whitespaces)) {
                candidates.append(bytes)
            }
        }
        guard let timestamp, !candidates.isEmpty else { throw .malformedHeader }
        var message = Array("\(timestamp).".utf8)
        message.append(contentsOf: rawBody)
        let matched = secrets.contains { key in
            candidates.contains { HMAC<SHA256>.isValidAuthenticationCode($0, authenticating: message, using: key) }
        }
        guard matched else { throw .noMatchingSignature }
        // The signed timestamp is the sender's number: an edge of Int64 is stale, never an overflow.
        let (age, overflow) = Int64(now.timeIntervalSince1970).subtractingReportingOverflow(timestamp)
        guard !overflow, age.magnitude <= UInt64(Self.tolerance) else { throw .staleTimestamp(ageSeconds: overflow ? Int64.max : age) }
        return timestamp
    }

    /// The header Stripe would send (tests and the replay tooling use it).
    public static func header(rawBody: some DataProtocol, secret: String, timestamp: Int64) -> String {
        var message = Array("\(timestamp).".utf8)
        message.append(contentsOf: rawBody)
        let mac = HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: Array(secret.utf8)))
        return "t=\(timestamp),v1=\(hexString(mac))"
    }

    static func hexBytes(_ text: String) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count == 64 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(32)
        var index = 0
        while index < utf8.count {
            guard let high = hexValue(utf8[index]), let low = hexValue(utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }

    static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
