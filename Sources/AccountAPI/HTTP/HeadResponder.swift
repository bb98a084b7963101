import HTTPTypes
import Hummingbird

/// HEAD is answered wherever GET is (RFC 9110 §9.3.2): the request is routed as GET and the response keeps its
/// status and headers without the body. Load balancers' health checks use it. A wrapper around the router's responder,
/// not a router middleware: those run after the route was chosen by method.
struct HeadResponder<Wrapped: HTTPResponder>: HTTPResponder {
    typealias Context = Wrapped.Context
    let wrapped: Wrapped

    func respond(to request: Request, context: Context) async throws -> Response {
        guard request.method == .head else { return try await wrapped.respond(to: request, context: context) }
        var head = request.head
        head.method = .get
        var response = try await wrapped.respond(to: Request(head: head, body: request.body), context: context)
        response.body = .init()
        return response
    }
}
