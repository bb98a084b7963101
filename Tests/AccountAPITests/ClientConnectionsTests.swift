import Testing

@testable import AccountAPI

/// Connections one client may hold open (`scripts/attack a31` does the same against a real process with sockets).
@Suite("Connections per client")
struct ClientConnectionsTests {
    @Test func oneClientHoldsAtMostItsShareAndGivesItBack() throws {
        let proxies = try TrustedProxies.parse("10.0.0.0/8").get()
        let connections = ClientConnections(perClientMax: 2, proxies: proxies)
        let first = try #require(connections.open(peer: "192.0.2.1"))
        #expect(connections.open(peer: "192.0.2.1") != nil)
        #expect(connections.open(peer: "192.0.2.1") == nil, "a third from one address")
        #expect(connections.open(peer: "192.0.2.2") != nil, "another address has its own")
        let v6 = try #require(connections.open(peer: "2001:db8:1:2::1"))
        #expect(connections.open(peer: "2001:db8:1:2:ffff::9") != nil)
        #expect(connections.open(peer: "2001:db8:1:2:aaaa::7") == nil, "one /64 is one client")
        #expect(connections.open(peer: "2001:db8:1:3::1") != nil, "the next /64 is another")
        for _ in 0..<5 { #expect(connections.open(peer: "10.1.2.3") == "", "a trusted proxy is not capped") }
        #expect(connections.open(peer: nil) == "", "a peer without an address (a Unix socket) is not capped")
        connections.close(first)
        #expect(connections.open(peer: "192.0.2.1") != nil, "a closed connection gives its place back")
        connections.close(v6)
        #expect(connections.inUse.connections == 11)
    }

    @Test func memoryIsGivenBackOnceAfterASpikeOfConnections() {
        let connections = ClientConnections(perClientMax: 10_000, proxies: .none)
        let opened = (0..<ClientConnections.trimFrom).map { connections.open(peer: "198.51.100.\($0 % 200)") }
        #expect(!connections.takeTrimDue(), "still open")
        for client in opened.dropFirst(ClientConnections.trimFrom / 4) { connections.close(client ?? "") }
        #expect(connections.takeTrimDue())
        #expect(!connections.takeTrimDue(), "once per spike")
    }
}
