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
}
