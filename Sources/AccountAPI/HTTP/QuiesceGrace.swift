import NIOCore

/// Part of the drain (`serve`'s SIGTERM): a graceful shutdown closes every connection that is between requests. A
/// connection a load balancer opened a moment earlier may already hold its request, unread, in the socket; closed
/// at once, the balancer gets a reset after sending it and cannot tell whether it ran. So the close is held for a
/// short grace: a request that arrives meanwhile is read first (the connection then closes after its answer), and an
/// idle one closes when the grace ends. Measured by `scripts/operations-test rolling` (no request cut in flight).
final class QuiesceGrace: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = Any
    typealias InboundOut = Any

    static let graceMilliseconds: Int64 = 500
    private var held: Scheduled<Void>?

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.fireChannelRead(data)
        // A request is being read: the handlers after this one now close the connection after its answer.
        if let held {
            held.cancel()
            self.held = nil
            context.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard event is ChannelShouldQuiesceEvent, held == nil else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        held = context.eventLoop.assumeIsolated().scheduleTask(in: .milliseconds(Self.graceMilliseconds)) {
            guard self.held != nil else { return }
            self.held = nil
            context.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        held?.cancel()
        held = nil
    }
}
