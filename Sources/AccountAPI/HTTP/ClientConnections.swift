import NIOCore
import Networks
import Synchronization

/// What open connections may hold before a request is read. A request head is buffered until its blank line, and the
/// idle timeout is met by one byte now and then: an outside tester held 12,000 connections from one address, each
/// 79 KB into an unfinished header, and grew the process from 62 MiB to 1.39 GB without signing in (``BodyBudget``
/// bounds bodies only). Now:
/// - a request head is at most ``headerBytesMax`` (HTTP's own decoder refuses more and the connection closes);
/// - one client (an IPv4 address or an IPv6 /64; the socket's peer) holds at most `HTTP_CONNECTIONS_PER_CLIENT`
///   connections at once; one more is closed as it opens. Trusted proxies (`TRUSTED_PROXIES`) are not counted: every
///   client behind them shares their address, and they limit their own clients;
/// - a request head must arrive whole within `HTTP_IDLE_TIMEOUT_SECONDS` of the connection's opening or last answer,
///   however steadily it trickles (Hummingbird's idle timeout counts request parts, not bytes);
/// - after a spike of connections the memory they held is given back (``takeTrimDue()``, `MemoryReturn`).
final class ClientConnections: Sendable {
    /// Every header the API reads (a bearer token, a console cookie, `X-Forwarded-For` through a few proxies) fits in a
    /// few hundred bytes; the longest request line the API documents is a passkey's id (1,364 characters, up to 16 KiB
    /// percent-encoded), so a head may hold 32 KiB.
    static let headerBytesMax = 32 * 1024
    /// Past this many connections at once, once three quarters of them have closed, memory is given back.
    static let trimFrom = 2_000

    let perClientMax: Int
    private let proxies: TrustedProxies
    /// Connections open, in all and per client.
    private let state = Mutex(ClientTally())

    init(perClientMax: Int, proxies: TrustedProxies) {
        (self.perClientMax, self.proxies) = (max(1, perClientMax), proxies)
    }

    /// Counts a connection from `peer`; nil when it is one too many for its client (nothing counted). The key to give
    /// back to ``close(_:)`` otherwise ("" for a trusted proxy or an unknown peer, which are only counted in all).
    func open(peer: String?) -> String? {
        let client = peer.flatMap { proxies.trusts($0) ? nil : IPNetwork.client($0) } ?? ""
        return state.withLock { state in
            guard client.isEmpty || state.hasRoom(client, max: perClientMax) else { return nil }
            state.take(1, client: client)
            return client
        }
    }

    func close(_ client: String) { state.withLock { $0.give(1, client: client) } }

    /// True once after at least ``trimFrom`` connections were open at once and a quarter or fewer still are.
    func takeTrimDue() -> Bool { state.withLock { $0.takeTrimDue(from: Self.trimFrom) } }

    /// Connections open now, and clients holding them (tests, metrics).
    var inUse: (connections: Int, clients: Int) { state.withLock { ($0.total, $0.clients) } }

    /// A connection's guard (one per connection, made as it is set up).
    func guardHandler() -> ConnectionGuard { ConnectionGuard(connections: self) }
}

/// One connection's side of ``ClientConnections``: admits it as it opens (or closes it) and gives its place back as it
/// closes. Runs on the connection's event loop.
final class ConnectionGuard: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = Any
    typealias InboundOut = Any

    private let connections: ClientConnections
    private var client: String?

    init(connections: ClientConnections) { self.connections = connections }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { admit(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        admit(context)
        context.fireChannelActive()
    }

    private func admit(_ context: ChannelHandlerContext) {
        guard client == nil else { return }
        guard let client = connections.open(peer: context.channel.remoteAddress?.ipAddress) else {
            context.close(promise: nil)
            return
        }
        self.client = client
    }

    func channelInactive(context: ChannelHandlerContext) {
        release()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) { release() }

    private func release() {
        if let client { connections.close(client) }
        client = nil
    }
}
