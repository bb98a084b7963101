import CoreMetrics
import Metrics

/// Connection-use gauges (`db_connections_in_use{engine}`), through swift-metrics (a no-op until the
/// executable bootstraps a backend).
enum StorageMetrics {
    static let postgresInUse = Meter(label: "db_connections_in_use", dimensions: [("engine", "postgres")])
    static let sqliteInUse = Meter(label: "db_connections_in_use", dimensions: [("engine", "sqlite")])

    static func using<T>(_ meter: Meter, _ body: () async throws -> T) async rethrows -> T {
        meter.increment()
        defer { meter.decrement() }
        return try await body()
    }
}
