import Foundation
import HTTPTypes
import Hummingbird

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An IPv4 or IPv6 network in CIDR notation (`10.0.0.0/8`, `::1/128`; a bare address is a /32 or /128).
struct IPNetwork: Sendable, Equatable, CustomStringConvertible {
    let address: [UInt8]
    let prefixLength: Int

    init?(_ text: String) {
        let parts = text.trimmingCharacters(in: .whitespaces).split(separator: "/", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), let address = Self.bytes(of: String(parts[0])) else { return nil }
        let bits = address.count * 8
        let length = parts.count == 2 ? Int(parts[1]) : bits
        guard let length, (0...bits).contains(length) else { return nil }
        self.address = address
        self.prefixLength = length
    }

    func contains(_ other: [UInt8]) -> Bool {
        guard other.count == address.count else { return false }
        var left = prefixLength
        for (a, b) in zip(address, other) where left > 0 {
            let mask: UInt8 = left >= 8 ? 0xff : ~(0xff >> UInt8(left))
            if a & mask != b & mask { return false }
            left -= 8
        }
        return true
    }

    var description: String { "\(address.count == 4 ? "IPv4" : "IPv6")/\(prefixLength)" }

    /// The address's bytes (4 or 16), or nil when the text is not an IP address. IPv4-mapped IPv6 addresses count as IPv4.
    static func bytes(of text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return withUnsafeBytes(of: &v4) { Array($0) } }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, text, &v6) == 1 else { return nil }
        let bytes = withUnsafeBytes(of: &v6) { Array($0) }
        if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff { return Array(bytes[12...]) }
        return bytes
    }
}

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
