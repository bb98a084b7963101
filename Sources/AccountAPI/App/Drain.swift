import Hummingbird
import NIOCore
import ServiceLifecycle
import Synchronization

/// Whether this node is draining (SIGTERM received). While it drains, `/ready` answers 503 (balancers with health
/// checks stop sending) and every answer carries `Connection: close` (a client with a kept-alive connection opens its
/// next one elsewhere instead of finding this one closed).
public final class DrainState: Sendable {
    private let draining = Atomic(false)
    private let listener = Mutex<(any Channel)?>(nil)
    public init() {}
    public var isDraining: Bool { draining.load(ordering: .relaxed) }
    func begin() { draining.store(true, ordering: .relaxed) }

    /// The server's listening channel, once it serves.
    func serving(on channel: any Channel) { listener.withLock { $0 = channel } }

    /// How long the listener stops accepting before the server closes it (see ``stopAccepting()``).
    static let acceptPauseMilliseconds = 200

    /// Stops accepting connections, then waits ``acceptPauseMilliseconds``: a connection accepted just before the
    /// server closes its listener is still being set up on another event loop, and swift-nio's async server channel drops
    /// it once the listener is closed; the dropped connection then traps the process as it becomes active ("Deinited
    /// NIOAsyncWriter without calling finish()", apple/swift-nio#2637). `scripts/operations-test rolling` hit it once:
    /// a node crashed mid-drain with a grant in flight. Connections arriving meanwhile wait in the kernel's backlog and
    /// are refused when the listener closes, as they would be a moment later anyway.
    func stopAccepting() async {
        guard let channel = listener.withLock({ $0 }) else { return }
        try? await channel.setOption(ChannelOptions.autoRead, value: false).get()
        try? await Task.sleep(for: .milliseconds(Self.acceptPauseMilliseconds))
    }
}

/// Told of the graceful shutdown before the application (the outer group stops its services last to first), it marks
/// the node draining and returns, and then the application drains.
struct DrainService: NamedService {
    let state: DrainState
    func run() async throws {
        try? await gracefulShutdown()
        state.begin()
        await state.stopAccepting()
    }
}

struct DrainMiddleware<Context: RequestContext>: RouterMiddleware {
    let state: DrainState

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            var response = try await next(request, context)
            if state.isDraining { response.headers[.connection] = "close" }
            return response
        } catch let error as any HTTPResponseError where state.isDraining {
            throw ClosingError(base: error)
        }
    }

    /// An error answer sent while draining, with `Connection: close`.
    struct ClosingError: HTTPResponseError {
        let base: any HTTPResponseError
        var status: HTTPResponse.Status { base.status }
        func response(from request: Request, context: some RequestContext) throws -> Response {
            var response = try base.response(from: request, context: context)
            response.headers[.connection] = "close"
            return response
        }
    }
}
