import Crypto
import Foundation
import JWTKit
import SafeJSON

/// What a verified Sign in with Apple identity token says.
public struct AppleIdentity: Sendable, Equatable {
    /// Apple's stable user id (the same across email changes and relay addresses).
    public let subject: String
    public let email: String?
    public let emailVerified: Bool
    public let isPrivateEmail: Bool
}

/// Verifies Sign in with Apple identity tokens as Apple documents: RS256 only (never `none` or HS*), the key by `kid`
/// from Apple's JWKS (``AppleKeySet``), `iss` = https://appleid.apple.com, `aud` one of the configured client ids,
/// `exp` and `iat` within a minute's leeway, and — when the app sent a nonce — `nonce` = SHA-256 hex of it.
/// jwt-kit checks the signature; the claims are checked here against the service's clock.
public struct AppleIdentityVerifier: Sendable {
    public static let issuer = "https://appleid.apple.com"
    public static let tokenBytesMax = 8192
    public let clientIDs: Set<String>
    let keySet: AppleKeySet
    let now: @Sendable () -> Date
    let leewaySeconds: Double

    public init(clientIDs: Set<String>, keySet: AppleKeySet, now: @escaping @Sendable () -> Date, leewaySeconds: Double = 60) {
        self.clientIDs = clientIDs
        self.keySet = keySet
        self.now = now
        self.leewaySeconds = leewaySeconds
    }

    struct Header: Decodable { let alg: String?; let kid: String? }

    /// The claims this service reads (jwt-kit's `verify(using:)` hook stays empty: the checks below use our clock).
    struct Claims: JWTPayload {
        let iss: String?
        let aud: AudienceClaim?
        let sub: String?
        let exp: Double?
        let iat: Double?
        let nonce: String?
        let email: String?
        let email_verified: BoolClaim?
        let is_private_email: BoolClaim?
        func verify(using _: some JWTAlgorithm) throws {}
    }

    public func verify(_ token: String, nonce: String?) async throws -> AppleIdentity {
        let claims = try await verifiedClaims(token, as: Claims.self)
        guard claims.iss == Self.issuer else { throw IdentityError.invalid("The token was not issued by Apple.") }
        guard let audience = claims.aud?.value, !clientIDs.isDisjoint(with: audience) else {
            throw IdentityError.invalid("The token is for another app (aud).")
        }
        let time = now().timeIntervalSince1970
        guard let exp = claims.exp, exp + leewaySeconds > time else { throw IdentityError.invalid("The token has expired.") }
        guard let iat = claims.iat, iat - leewaySeconds <= time else { throw IdentityError.invalid("The token is not valid yet (iat).") }
        if let nonce {
            let expected = SHA256.hash(data: Data(nonce.utf8)).map { String(format: "%02x", $0) }.joined()
            guard claims.nonce == expected else { throw IdentityError.invalid("The token's nonce does not match the nonce sent.") }
        } else if claims.nonce != nil {
            // The app asked Apple for a nonce: without the raw one here, a captured token could be replayed.
            throw IdentityError.invalid("The token carries a nonce: send the raw nonce with it.")
        }
        guard let subject = claims.sub, !subject.isEmpty, subject.utf8.count <= 255 else { throw IdentityError.invalid("The token has no subject.") }
        return AppleIdentity(
            subject: subject, email: claims.email?.lowercased(), emailVerified: claims.email_verified?.value ?? false,
            isPrivateEmail: claims.is_private_email?.value ?? false)
    }

    /// The token's signature checked with Apple's key named by its `kid` (RS256 only), then its claims decoded.
    func verifiedClaims<T: JWTPayload>(_ token: String, as type: T.Type) async throws -> T {
        guard token.utf8.count <= Self.tokenBytesMax else { throw IdentityError.invalid("The token is too long.") }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerData = Self.base64URL(String(parts[0])),
            let header = try? UntrustedJSON.decode(Header.self, from: headerData)
        else { throw IdentityError.invalid("The token is not a JWT.") }
        // jwt-kit decodes the payload with Foundation: refuse first what would trap it (SafeJSON).
        guard let payloadData = Self.base64URL(String(parts[1])), (try? UntrustedJSON.check(payloadData)) != nil else {
            throw IdentityError.invalid("The token is not a JWT.")
        }
        guard header.alg == "RS256" else { throw IdentityError.invalid("The token must be signed with RS256 (got \(header.alg ?? "none")).") }
        guard let kid = header.kid, !kid.isEmpty, kid.utf8.count <= 100 else { throw IdentityError.invalid("The token names no key (kid).") }
        guard let keys = try await keySet.keys(for: kid) else { throw IdentityError.invalid("The token's key is not one of Apple's keys.") }
        do { return try await keys.verify(token, as: T.self) } catch {
            throw IdentityError.invalid("The token's signature does not verify.")
        }
    }

    static func base64URL(_ text: String) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }
}

/// One of Apple's server-to-server notifications for Sign in with Apple.
public struct AppleSignInEvent: Sendable, Equatable {
    /// `email-disabled`, `email-enabled`, `consent-revoked` or `account-delete`.
    public let type: String
    public let subject: String
    /// The notification's id (a replay has the same one).
    public let id: String
    /// When the event happened (`event_time`), if Apple said.
    public let eventTime: Date?
}

extension AppleIdentityVerifier {
    struct NotificationClaims: JWTPayload {
        let iss: String?
        let aud: AudienceClaim?
        let iat: Double?
        let jti: String?
        let events: String?
        func verify(using _: some JWTAlgorithm) throws {}
    }

    struct Events: Decodable { let type: String; let sub: String; let event_time: Double? }

    /// Notifications older than this are refused (a captured one cannot be replayed later).
    public static let notificationAgeMaxSeconds: Double = 3 * 86400

    /// Verifies a notification's `payload` (a JWT signed with Apple's keys, for one of the client ids) and reads its event.
    public func verifyNotification(_ token: String) async throws -> AppleSignInEvent {
        let claims = try await verifiedClaims(token, as: NotificationClaims.self)
        guard claims.iss == Self.issuer else { throw IdentityError.invalid("The notification was not issued by Apple.") }
        guard let audience = claims.aud?.value, !clientIDs.isDisjoint(with: audience) else {
            throw IdentityError.invalid("The notification is for another app (aud).")
        }
        guard let iat = claims.iat, iat - leewaySeconds <= now().timeIntervalSince1970 else {
            throw IdentityError.invalid("The notification is not valid yet (iat).")
        }
        guard now().timeIntervalSince1970 - iat <= Self.notificationAgeMaxSeconds else {
            throw IdentityError.invalid("The notification is too old (iat).")
        }
        guard let jti = claims.jti, !jti.isEmpty, jti.utf8.count <= 200 else { throw IdentityError.invalid("The notification has no id (jti).") }
        guard let text = claims.events, let events = try? UntrustedJSON.decode(Events.self, from: Data(text.utf8)), !events.sub.isEmpty else {
            throw IdentityError.invalid("The notification carries no event.")
        }
        return AppleSignInEvent(
            type: events.type, subject: events.sub, id: jti, eventTime: events.event_time.map { Date(timeIntervalSince1970: $0 / 1000) })
    }
}
