import Foundation
import Networks
import Storage

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Which URLs endpoints may have (server-side request forgery): https only (http only to a loopback host when
/// `WEBHOOKS_ALLOW_HTTP=true`), no credentials in the URL, at most 2,048 bytes, and a host whose every address is public
/// unless it lies in `WEBHOOKS_ALLOWED_NETWORKS` (so a loopback receiver needs both settings). The addresses are checked when the endpoint is saved and again before
/// every try (a name that later points inward is refused then); redirects are never followed.
public struct WebhookURLPolicy: Sendable {
    public static let urlBytesMax = 2048
    public var allowHTTP: Bool
    public var allowedNetworks: [IPNetwork]

    public init(allowHTTP: Bool = false, allowedNetworks: [IPNetwork] = []) {
        self.allowHTTP = allowHTTP
        self.allowedNetworks = allowedNetworks
    }

    /// Loopback, private, link-local, shared, multicast, reserved and documentation ranges (IPv4 and IPv6).
    static let refused: [IPNetwork] = [
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24",
        "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4", "::/128", "::1/128",
        "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001::/32", "2001:db8::/32", "2002::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
        "::/96", "::ffff:0:0:0/96", "192.88.99.0/24",
    ].compactMap(IPNetwork.init)

    /// The URL's form (no network): the reason it is refused, or nil.
    public func formProblem(_ text: String) -> String? {
        guard !text.isEmpty, text.utf8.count <= Self.urlBytesMax else { return "Field 'url' must be 1 to \(Self.urlBytesMax) bytes." }
        guard let parts = URLComponents(string: text), let scheme = parts.scheme?.lowercased(), let host = parts.host, !host.isEmpty else {
            return "Field 'url' must be an absolute https URL."
        }
        if parts.user != nil || parts.password != nil { return "Field 'url' must not contain a user name or password." }
        if parts.fragment != nil { return "Field 'url' must not contain a fragment." }
        switch scheme {
        case "https": return nil
        case "http" where allowHTTP && Self.isLoopbackName(host): return nil
        case "http": return "Field 'url' must use https\(allowHTTP ? " (http only to a loopback host)" : "")."
        default: return "Field 'url' must be an absolute https URL."
        }
    }

    /// Resolves the URL's host: the reason it is refused (an address inside a refused range, or a name that does not
    /// resolve), or nil when every address is allowed.
    public func addressProblem(_ text: String) async -> String? {
        guard let host = URLComponents(string: text)?.host else { return "Field 'url' must be an absolute https URL." }
        let name = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        let addresses = await Self.resolve(name)
        guard !addresses.isEmpty else { return "The URL's host '\(host.prefix(100))' does not resolve." }
        for address in addresses {
            guard let bytes = IPNetwork.bytes(of: address) else { return "The URL's host resolves to an unreadable address." }
            if Self.refused.contains(where: { $0.contains(bytes) }) && !allowedNetworks.contains(where: { $0.contains(bytes) }) {
                return "The URL's host resolves to \(address), a private or reserved address; webhooks go to public addresses only."
            }
        }
        return nil
    }

    static let loopback = ["127.0.0.0/8", "::1/128"].compactMap(IPNetwork.init)

    static func isLoopbackName(_ host: String) -> Bool {
        let name = host.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        if name == "localhost" { return true }
        guard let bytes = IPNetwork.bytes(of: name) else { return false }
        return loopback.contains { $0.contains(bytes) }
    }

    /// Every address `host` resolves to (getaddrinfo, off the cooperative threads), as text.
    static func resolve(_ host: String) async -> [String] {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                var hints = addrinfo()
                hints.ai_family = AF_UNSPEC
                #if canImport(Glibc)
                hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
                #else
                hints.ai_socktype = SOCK_STREAM
                #endif
                var list: UnsafeMutablePointer<addrinfo>?
                guard getaddrinfo(host, nil, &hints, &list) == 0, let first = list else { return continuation.resume(returning: []) }
                defer { freeaddrinfo(first) }
                var found: [String] = []
                var node: UnsafeMutablePointer<addrinfo>? = first
                while let entry = node {
                    var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
                    if entry.pointee.ai_family == AF_INET {
                        var address = entry.pointee.ai_addr.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
                        inet_ntop(AF_INET, &address, &buffer, socklen_t(buffer.count))
                    } else if entry.pointee.ai_family == AF_INET6 {
                        var address = entry.pointee.ai_addr.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
                        inet_ntop(AF_INET6, &address, &buffer, socklen_t(buffer.count))
                    }
                    let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                    if !text.isEmpty { found.append(text) }
                    node = entry.pointee.ai_next
                }
                continuation.resume(returning: found)
            }
        }
    }
}
