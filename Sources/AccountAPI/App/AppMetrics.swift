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

    /// ASCII letters and digits stay, every other Unicode scalar becomes `_`. Runs each time a metric handle is made, so the
    /// common case (already clean) is one pass over the bytes without Unicode property look-ups.
    static func sanitize(_ text: String) -> String {
        func kept(_ value: UInt32) -> Bool {
            (0x30...0x39).contains(value) || (0x41...0x5A).contains(value) || (0x61...0x7A).contains(value)
        }
        if text.utf8.allSatisfy({ kept(UInt32($0)) || $0 == UInt8(ascii: "_") }) { return text }
        return String(String.UnicodeScalarView(text.unicodeScalars.map { kept($0.value) ? $0 : "_" }))
    }

    static var holdsPending: CoreMetrics.Gauge { CoreMetrics.Gauge(label: "ledger_holds_pending") }
}
