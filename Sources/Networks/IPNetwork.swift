import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An IPv4 or IPv6 network in CIDR notation (`10.0.0.0/8`, `::1/128`; a bare address is a /32 or /128).
public struct IPNetwork: Sendable, Equatable, CustomStringConvertible {
    public let address: [UInt8]
    public let prefixLength: Int

    public init?(_ text: String) {
        let parts = text.trimmingCharacters(in: .whitespaces).split(separator: "/", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), let address = Self.bytes(of: String(parts[0])) else { return nil }
        let bits = address.count * 8
        let length = parts.count == 2 ? Int(parts[1]) : bits
        guard let length, (0...bits).contains(length) else { return nil }
        self.address = address
        self.prefixLength = length
    }

    public func contains(_ other: [UInt8]) -> Bool {
        guard other.count == address.count else { return false }
        var left = prefixLength
        for (a, b) in zip(address, other) where left > 0 {
            let mask: UInt8 = left >= 8 ? 0xff : ~(0xff >> UInt8(left))
            if a & mask != b & mask { return false }
            left -= 8
        }
        return true
    }

    public var description: String { "\(address.count == 4 ? "IPv4" : "IPv6")/\(prefixLength)" }

    /// What one client controls, as a budget's key: an IPv4 address, or an IPv6 /64 (one subscriber line or host gets a
    /// whole /64, and every address in it is theirs to send from, so keying the exact address would give them 2^64
    /// budgets). Text that is not an address is its own key.
    public static func client(_ ip: String) -> String {
        guard let bytes = bytes(of: ip) else { return ip }
        guard bytes.count == 16 else { return bytes.map(String.init).joined(separator: ".") }
        let prefix = stride(from: 0, to: 8, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
        return prefix.joined(separator: ":") + "::/64"
    }

    /// The address's bytes (4 or 16), or nil when the text is not an IP address. IPv4-mapped IPv6 addresses count as IPv4.
    public static func bytes(of text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return withUnsafeBytes(of: &v4) { Array($0) } }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, text, &v6) == 1 else { return nil }
        let bytes = withUnsafeBytes(of: &v6) { Array($0) }
        if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff { return Array(bytes[12...]) }
        return bytes
    }
}
