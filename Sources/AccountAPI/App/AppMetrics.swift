import Auth
import CoreMetrics
import Foundation
import Hummingbird
import Logging
import Metrics
import NIOCore
import Prometheus
import Storage

/// Prometheus metrics for the whole process: swift-metrics is bootstrapped once with a Prometheus factory
/// (names and labels sanitised to `[a-zA-Z0-9_]`), and `GET /metrics` renders the registry.
enum AppMetrics {
    static let registry = PrometheusCollectorRegistry()

    /// Idempotent: the first call bootstraps swift-metrics (a process can do that once).
    static let bootstrap: Void = {
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.nameAndLabelSanitizer = { label, dimensions in
            (sanitize(label), dimensions.map { (sanitize($0.0), $0.1) })
        }
        factory.defaultDurationHistogramBuckets = [
            .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
            .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5), .seconds(10),
        ]
        MetricsSystem.bootstrap(factory)
    }()

    static func sanitize(_ text: String) -> String {
        String(text.unicodeScalars.map { $0.properties.isAlphabetic && $0.isASCII || ("0"..."9").contains($0) ? Character($0) : "_" })
    }

    static var holdsPending: CoreMetrics.Gauge { CoreMetrics.Gauge(label: "ledger_holds_pending") }

    /// Billing events by provider and outcome (`billing_events{provider,outcome}`).
    static func billingEvent(provider: String, outcome: String) {
        Counter(label: "billing_events", dimensions: [("provider", provider), ("outcome", outcome)]).increment()
    }
}

/// `GET /metrics`: Prometheus text format; gauges that need the database are read at scrape time. Only with
/// `Authorization: Bearer <METRICS_TOKEN>`; without a configured token the route answers 404 (the series name routes and
/// error counts, which are nobody's business on the API port).
struct MetricsRoutes: Sendable {
    let database: any Database
    let token: String?

    func register(on router: Router<AppRequestContext>) {
        router.get("/metrics") { request, context in
            guard let token else { throw Problem.notFound("Metrics are off; set METRICS_TOKEN to scrape GET /metrics with it as a bearer token.") }
            guard let given = Authenticator.bearerToken(request), SecretHasher.constantTimeEqual(SecretHasher.tokenHash(given), SecretHasher.tokenHash(token)) else {
                throw Problem.unauthorized("GET /metrics needs Authorization: Bearer <METRICS_TOKEN>.")
            }
            if let row = try? await database.withConnection(logger: context.logger, { try await $0.first("SELECT COUNT(*) AS n FROM ledger_holds WHERE status = 'pending'") }) {
                AppMetrics.holdsPending.record(Double((try? row.int("n")) ?? 0))
            }
            var buffer: [UInt8] = []
            buffer.reserveCapacity(16 * 1024)
            AppMetrics.registry.emit(into: &buffer)
            return Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(bytes: buffer)))
        }
    }
}
