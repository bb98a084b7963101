import CoreMetrics
import Metrics

/// Connection-use gauges (`db_connections_in_use{engine}`), through swift-metrics (a no-op until the
/// executable bootstraps a backend).
enum StorageMetrics {
    // Computed, not stored: a handle made before the backend is bootstrapped would stay a no-op for good
    // (the Prometheus factory returns the same series for the same name and labels).
    static var postgresInUse: Meter { Meter(label: "db_connections_in_use", dimensions: [("engine", "postgres")]) }
    static var sqliteInUse: Meter { Meter(label: "db_connections_in_use", dimensions: [("engine", "sqlite")]) }

    static func using<T>(_ meter: Meter, _ body: () async throws -> T) async rethrows -> T {
        meter.increment()
        defer { meter.decrement() }
        return try await body()
    }
}
