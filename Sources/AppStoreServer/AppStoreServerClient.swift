import AsyncHTTPClient
import Foundation
import JWTKit
import Logging
import NIOCore
import NIOHTTP1
import SafeJSON

/// Where and as whom this service calls Apple's App Store Server API: the In-App Purchase key (`APPLE_API_KEY_ID`,
/// `APPLE_API_ISSUER_ID`, the `.p8` file at `APPLE_API_PRIVATE_KEY_FILE`), the app (`APPLE_BUNDLE_ID`), and the
/// environment's base URL (`APPLE_API_BASE_URL` overrides it, for a local mock).
public struct AppStoreServerSettings: Sendable {
    public static let productionURL = "https://api.storekit.itunes.apple.com"
    public static let sandboxURL = "https://api.storekit-sandbox.itunes.apple.com"

    public var keyID: String
    public var issuerID: String
    public var bundleID: String
    public var privateKeyPEM: String
    public var baseURL: String
    /// Tries per call (the first included) when Apple answers 429 or 5xx or the connection fails.
    public var attempts = 4
    /// The first retry waits this long, each next one twice as long (or Apple's `Retry-After`, at most 30 s).
    public var backoffSeconds = 0.5
    /// Each try's timeout; all tries of one call end within twice this (async-http-client keeps retrying a refused
    /// connection until the request's deadline, so an unreachable Apple costs a try's whole timeout).
    public var timeoutSeconds: Double = 10
    var deadlineSeconds: Double { timeoutSeconds * 2 }

    public init(keyID: String, issuerID: String, bundleID: String, privateKeyPEM: String, baseURL: String) {
        self.keyID = keyID
        self.issuerID = issuerID
        self.bundleID = bundleID
        self.privateKeyPEM = privateKeyPEM
        self.baseURL = baseURL
    }
}

/// Why a call to Apple failed: Apple's own refusal (4xx other than 429, with its `errorCode`), or Apple unreachable or
/// failing after every retry.
public enum AppStoreServerError: Error, Sendable, Equatable {
    case refused(status: Int, errorCode: Int?, message: String)
    case unavailable(String)
    case invalidConfiguration(String)
    case malformedAnswer(String)

    public var detail: String {
        switch self {
        case .refused(let status, let code, let message): "Apple refused (\(status)\(code.map { ", errorCode \($0)" } ?? "")): \(message)"
        case .unavailable(let s), .invalidConfiguration(let s), .malformedAnswer(let s): s
        }
    }
}

/// A client of Apple's App Store Server API (as Apple's app-store-server-library is): an ES256 bearer token per call
/// (jwt-kit), async-http-client, timeouts, and retries with backoff on 429 and 5xx. Answers carry Apple's signed payloads
/// as they came; verifying them is the caller's (Billing's chain checks).
public struct AppStoreServerClient: Sendable {
    let settings: AppStoreServerSettings
    let keys: JWTKeyCollection
    let http: HTTPClient
    let now: @Sendable () -> Date
    let sleep: @Sendable (Double) async throws -> Void

    public init(
        settings: AppStoreServerSettings, http: HTTPClient, now: @escaping @Sendable () -> Date,
        sleep: @escaping @Sendable (Double) async throws -> Void = { try await Task.sleep(for: .seconds($0)) }
    ) async throws {
        let key: ES256PrivateKey
        do { key = try ES256PrivateKey(pem: settings.privateKeyPEM) } catch {
            throw AppStoreServerError.invalidConfiguration("APPLE_API_PRIVATE_KEY_FILE is not an ES256 (P-256) private key in PEM")
        }
        self.settings = settings
        self.keys = await JWTKeyCollection().add(ecdsa: key, kid: JWKIdentifier(string: settings.keyID))
        self.http = http
        self.now = now
        self.sleep = sleep
    }

    struct Claims: JWTPayload {
        let iss: IssuerClaim
        let iat: IssuedAtClaim
        let exp: ExpirationClaim
        let aud: AudienceClaim
        let bid: String
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    /// The bearer token Apple asks for: ES256, `kid` the key id, `typ` JWT; `iss` the issuer id, `aud`
    /// appstoreconnect-v1, `bid` the bundle id, valid 5 minutes.
    func token() async throws -> String {
        let issued = now()
        var header = JWTHeader()
        header.typ = "JWT"
        header.kid = settings.keyID
        return try await keys.sign(
            Claims(
                iss: IssuerClaim(value: settings.issuerID), iat: IssuedAtClaim(value: issued),
                exp: ExpirationClaim(value: issued.addingTimeInterval(300)),
                aud: AudienceClaim(value: "appstoreconnect-v1"), bid: settings.bundleID),
            kid: JWKIdentifier(string: settings.keyID), header: header)
    }

    /// One call: the path under the base URL, an optional JSON body. Returns the answer's status and body.
    func call(_ method: HTTPMethod, _ path: String, body: Data? = nil, logger: Logger) async throws(AppStoreServerError) -> (Int, Data) {
        var lastFailure = "no answer"
        var tries = 0
        let started = ContinuousClock.now
        func remaining() -> Double {
            let elapsed = ContinuousClock.now - started
            return settings.deadlineSeconds - (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
        }
        for attempt in 1...max(1, settings.attempts) {
            guard remaining() > 0.05 else { break }
            tries = attempt
            var request = HTTPClientRequest(url: settings.baseURL + path)
            request.method = method
            do { request.headers.add(name: "Authorization", value: "Bearer \(try await token())") } catch {
                throw .invalidConfiguration("the App Store Server API token cannot be signed")
            }
            if let body {
                request.headers.add(name: "Content-Type", value: "application/json")
                request.body = .bytes(ByteBuffer(bytes: body))
            }
            var wait = settings.backoffSeconds * Double(1 << min(attempt - 1, 6))
            do {
                let response = try await http.execute(request, timeout: .milliseconds(Int64(min(settings.timeoutSeconds, remaining()) * 1000)))
                let data = Data((try await response.body.collect(upTo: 4 * 1024 * 1024)).readableBytesView)
                let status = Int(response.status.code)
                if status == 429 || status >= 500 {
                    lastFailure = "Apple answered \(status)"
                    if let after = response.headers.first(name: "Retry-After").flatMap(Double.init) { wait = min(max(after, 0), 30) }
                } else if status >= 400 {
                    let error = try? UntrustedJSON.decode(AppleErrorBody.self, from: data)
                    throw AppStoreServerError.refused(status: status, errorCode: error?.errorCode, message: error?.errorMessage ?? "no message")
                } else {
                    return (status, data)
                }
            } catch let error as AppStoreServerError {
                throw error
            } catch {
                lastFailure = "Apple could not be reached (\(type(of: error)))"
            }
            logger.warning("App Store Server API call failed", metadata: ["path": "\(path)", "attempt": "\(attempt)", "why": "\(lastFailure)"])
            guard attempt < settings.attempts, wait < remaining() else { break }
            try? await sleep(wait)
        }
        throw .unavailable("\(lastFailure) after \(tries) \(tries == 1 ? "try" : "tries")")
    }

    func decode<T: Decodable>(_ type: T.Type, _ data: Data) throws(AppStoreServerError) -> T {
        do { return try UntrustedJSON.decode(T.self, from: data) } catch {
            throw .malformedAnswer("Apple's answer is not the JSON expected (\(T.self))")
        }
    }

    static func escaped(_ segment: String) -> String {
        segment.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
    }
}

struct AppleErrorBody: Decodable {
    let errorCode: Int?
    let errorMessage: String?
}
