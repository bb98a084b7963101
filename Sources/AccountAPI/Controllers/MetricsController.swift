import Auth
import CoreMetrics
import Hummingbird
import Ledger
import NIOCore
import Prometheus

/// `GET /metrics`: Prometheus text format; gauges that need the database are read at scrape time. Only with
/// `Authorization: Bearer <METRICS_TOKEN>`; without a configured token the route answers 404 (the series name routes and
/// error counts, which are nobody's business on the API port).
struct MetricsController: Sendable {
    let ledger: LedgerService
    let token: String?

    func addRoutes(to router: Router<AppRequestContext>) {
        router.get("/metrics", use: metrics)
    }

    @Sendable func metrics(_ request: Request, context: AppRequestContext) async throws -> Response {
        guard let token else { throw Problem.notFound("Metrics are off; set METRICS_TOKEN to scrape GET /metrics with it as a bearer token.") }
        guard let given = Authenticator.bearerToken(request),
            SecretHasher.constantTimeEqual(SecretHasher.tokenHash(given), SecretHasher.tokenHash(token))
        else { throw Problem.unauthorized("GET /metrics needs Authorization: Bearer <METRICS_TOKEN>.") }
        if let pending = try? await ledger.pendingHoldCount(logger: context.logger) { AppMetrics.holdsPending.record(Double(pending)) }
        var buffer: [UInt8] = []
        buffer.reserveCapacity(16 * 1024)
        AppMetrics.registry.emit(into: &buffer)
        return Response(
            status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(bytes: buffer)))
    }
}
