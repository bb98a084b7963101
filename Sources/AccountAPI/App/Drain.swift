import Hummingbird
import ServiceLifecycle
import Synchronization

/// Whether this node is draining (SIGTERM received). While it drains, `/ready` answers 503 (balancers with health
/// checks stop sending) and every answer carries `Connection: close` (a client with a kept-alive connection opens its
/// next one elsewhere instead of finding this one closed).
public final class DrainState: Sendable {
    private let draining = Atomic(false)
    public init() {}
    public var isDraining: Bool { draining.load(ordering: .relaxed) }
    func begin() { draining.store(true, ordering: .relaxed) }
}

/// Told of the graceful shutdown before the application (the outer group stops its services last to first), it marks
/// the node draining and returns, and then the application drains.
struct DrainService: Service {
    let state: DrainState
    func run() async throws {
        try? await gracefulShutdown()
        state.begin()
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
