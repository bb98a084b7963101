import Foundation
import HTTPTypes
import Hummingbird
import Networks
import Storage

/// Which hops may tell the client's address (`TRUSTED_PROXIES`): the socket peer when it is not trusted; otherwise the
/// rightmost `X-Forwarded-For` entry that is not a trusted proxy (entries left of it could be written by anyone).
struct TrustedProxies: Sendable {
    let networks: [IPNetwork]

    static let none = TrustedProxies(networks: [])

    /// An entry of `TRUSTED_PROXIES` that is not an address or CIDR.
    struct InvalidEntry: Error, Equatable { let entry: String }

    /// Parses a comma-separated list of CIDRs; the failure names the first entry that is not one.
    static func parse(_ text: String) -> Result<TrustedProxies, InvalidEntry> {
        var networks: [IPNetwork] = []
        for entry in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !entry.isEmpty {
            guard let network = IPNetwork(entry) else { return .failure(InvalidEntry(entry: entry)) }
            networks.append(network)
        }
        return .success(TrustedProxies(networks: networks))
    }

    func trusts(_ ip: String) -> Bool {
        guard !networks.isEmpty, let bytes = IPNetwork.bytes(of: ip) else { return false }
        return networks.contains { $0.contains(bytes) }
    }

    /// The client's address for a request whose socket peer is `peer`.
    func clientIP(peer: String, forwardedFor: [String]) -> String {
        guard trusts(peer) else { return peer }
        let hops = forwardedFor.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
        var client = peer
        for hop in hops.reversed() {
            guard IPNetwork.bytes(of: hop) != nil else { break }  // a malformed hop: stop at the last address we could trust
            client = hop
            if !trusts(hop) { break }
        }
        return client
    }
}

/// Sets the request context's client IP from the socket peer and, through trusted proxies only, `X-Forwarded-For`.
struct ClientAddressMiddleware: RouterMiddleware {
    typealias Context = AppRequestContext
    let proxies: TrustedProxies

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard !proxies.networks.isEmpty else { return try await next(request, context) }
        var context = context
        context.clientIP = proxies.clientIP(peer: context.remoteIP, forwardedFor: request.headers[values: .xForwardedFor])
        return try await next(request, context)
    }
}

extension HTTPField.Name {
    static let xForwardedFor = Self("X-Forwarded-For")!
}
