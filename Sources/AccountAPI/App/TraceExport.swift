import Foundation
import Logging
import OTel
import ServiceLifecycle
import Traces

/// OpenTelemetry traces: on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set.
/// swift-otel reads the standard `OTEL_*` variables (protocol `http/protobuf` or `http/json`, headers, sampler, batch
/// delay); logs and metrics stay with this service's own backends (stdout, `/metrics`).
enum TraceExport {
    static func bootstrap(_ config: AppConfig, logger: Logger) throws -> [any Service] {
        guard config.tracesEnabled else { return [] }
        var configuration = OTel.Configuration.default
        configuration.serviceName = "account-service"
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        configuration.traces.enabled = true
        // Logs and metrics have their own backends here; an OTEL_*_EXPORTER asking for them is not passed on (a second
        // metrics bootstrap would stop the process).
        let environment = ProcessInfo.processInfo.environment.filter { $0.key != "OTEL_METRICS_EXPORTER" && $0.key != "OTEL_LOGS_EXPORTER" }
        let exporter = try OTel.bootstrap(configuration: configuration, environment: environment)
        Traces.enable()
        logger.info("traces exported over OTLP")
        return [exporter]
    }
}
