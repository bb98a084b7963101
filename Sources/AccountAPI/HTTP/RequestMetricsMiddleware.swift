import Dispatch
import HTTPTypes
import Hummingbird
import Metrics
import Synchronization

/// Requests by route, method and status, their latency, errors and the requests in progress: the same series as
/// Hummingbird's `MetricsMiddleware` (`hb_requests`, `http_server_request_duration`, `hb_request_errors`,
/// `http_server_active_requests`), recorded when the handler has produced its response.
///
/// Hummingbird's middleware records after the body is written, by wrapping the body in a closure. That turns every
/// buffered response into a streamed one, which Hummingbird writes as three separate parts, each flushed on its own:
/// two `write` system calls per response instead of one. Every response here is buffered, so the time to write it
/// is the kernel's, and recording a moment earlier costs the latency figures nothing that matters.
struct RequestMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    private let metrics = RequestMetrics()

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = DispatchTime.now().uptimeNanoseconds
        let active = metrics.active(request.method)
        active.increment()
        defer { active.decrement() }
        do {
            let response = try await next(request, context)
            let endpoint = metrics.endpoint(.init(route: context.endpointPath ?? "Unknown", method: request.method, status: response.status))
            endpoint.requests.increment()
            endpoint.duration.recordNanoseconds(DispatchTime.now().uptimeNanoseconds - start)
            return response
        } catch {
            let status = (error as? any HTTPResponseError)?.status ?? .internalServerError
            let endpoint = metrics.endpoint(.init(route: context.endpointPath ?? "NotFound", method: request.method, status: status))
            endpoint.requests.increment()
            endpoint.errors.increment()
            throw error
        }
    }
}

/// The metric handles by method and by route, method and status, made once each (the factory's lookup is slower).
private final class RequestMetrics: Sendable {
    struct EndpointID: Hashable { let route: String; let method: HTTPRequest.Method; let status: HTTPResponse.Status }

    struct Endpoint: Sendable {
        let requests: Counter
        let duration: Timer
        let errors: Counter

        init(_ id: EndpointID) {
            let dimensions = [
                ("http.route", id.route), ("http.request.method", id.method.rawValue), ("http.response.status_code", String(id.status.code)),
            ]
            requests = Counter(label: "hb.requests", dimensions: dimensions)
            duration = Timer(label: "http.server.request.duration", dimensions: dimensions, preferredDisplayUnit: .seconds)
            errors = Counter(
                label: "hb.request.errors",
                dimensions: [("http.route", id.route), ("http.request.method", id.method.rawValue), ("error.type", String(id.status.code))])
        }
    }

    private let endpoints = Mutex<[EndpointID: Endpoint]>([:])
    private let methods = Mutex<[HTTPRequest.Method: Meter]>([:])

    func endpoint(_ id: EndpointID) -> Endpoint {
        endpoints.withLock { cache in
            if let found = cache[id] { return found }
            let made = Endpoint(id)
            cache[id] = made
            return made
        }
    }

    func active(_ method: HTTPRequest.Method) -> Meter {
        methods.withLock { cache in
            if let found = cache[method] { return found }
            let made = Meter(label: "http.server.active_requests", dimensions: [("http.request.method", method.rawValue)])
            cache[method] = made
            return made
        }
    }
}
