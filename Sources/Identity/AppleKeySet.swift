import AsyncHTTPClient
import Foundation
import JWTKit
import Logging
import NIOCore
import NIOHTTP1
import SafeJSON

/// Apple's signing keys (a JWKS), fetched with async-http-client and cached. A token naming a key the cache does not
/// have refetches the set, at most once a minute; an unreachable set is ``IdentityError/unavailable`` (never an accept).
public actor AppleKeySet {
    public static let appleURL = "https://appleid.apple.com/auth/keys"
    let url: String
    let client: HTTPClient
    let refetchIntervalSeconds: Double
    let now: @Sendable () -> Date
    var keys: JWTKeyCollection?
    var kids: Set<String> = []
    var lastFetch: Date?
    var inFlight: Task<Void, any Error>?
    /// After a failed fetch with nothing cached, tokens are refused (503) this long before the next try.
    let failedFetchBackoffSeconds: Double = 5

    public init(url: String = AppleKeySet.appleURL, client: HTTPClient, now: @escaping @Sendable () -> Date, refetchIntervalSeconds: Double = 60) {
        self.url = url
        self.client = client
        self.now = now
        self.refetchIntervalSeconds = refetchIntervalSeconds
    }

    /// Keys holding `kid`, fetching the set when it is not cached (or the cache lacks `kid` and the last fetch is a
    /// minute old). nil: the set does not have `kid`.
    func keys(for kid: String) async throws -> JWTKeyCollection? {
        if let keys, kids.contains(kid) { return keys }
        if let inFlight {
            // One fetch at a time: concurrent callers wait for it instead of starting their own.
            try await inFlight.value
            return kids.contains(kid) ? keys : nil
        }
        if let lastFetch, now().timeIntervalSince(lastFetch) < (keys == nil ? failedFetchBackoffSeconds : refetchIntervalSeconds) {
            if keys == nil { throw IdentityError.unavailable("Apple's keys cannot be fetched right now.") }
            return nil
        }
        let task = Task { try await fetch() }
        inFlight = task
        defer { inFlight = nil }
        try await task.value
        return kids.contains(kid) ? keys : nil
    }

    func fetch() async throws {
        lastFetch = now()
        var request = HTTPClientRequest(url: url)
        request.method = .GET
        let body: ByteBuffer
        do {
            let response = try await client.execute(request, timeout: .seconds(5))
            guard response.status == .ok else { throw IdentityError.unavailable("Apple's keys answered \(response.status.code).") }
            body = try await response.body.collect(upTo: 256 * 1024)
        } catch let error as IdentityError {
            throw error
        } catch {
            throw IdentityError.unavailable("Apple's keys cannot be fetched right now.")
        }
        let set: JWKS
        do { set = try UntrustedJSON.decode(JWKS.self, from: Data(body.readableBytesView)) } catch {
            throw IdentityError.unavailable("Apple's keys are not a JSON Web Key Set.")
        }
        // Only RSA keys for RS256 are kept: the algorithm never comes from a token.
        let rsa = set.keys.filter { $0.keyType == .rsa && ($0.algorithm == nil || $0.algorithm == .rs256) && $0.keyIdentifier != nil }
        let collection = JWTKeyCollection()
        for key in rsa { _ = try? await collection.add(jwk: key) }
        keys = collection
        kids = Set(rsa.compactMap { $0.keyIdentifier?.string })
    }
}
