import Synchronization
import Tracing

/// Spans for what a request or a background job does (database statements, Argon2, mail, webhook sends, the image
/// worker, the jobs themselves), through swift-distributed-tracing. Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set:
/// `serve` then bootstraps swift-otel and turns this on. While off, no tracer is asked at all (the statement path stays
/// as it was).
public enum Traces {
    private static let on = Atomic(false)

    public static var enabled: Bool { on.load(ordering: .relaxed) }

    /// Called once the tracer is bootstrapped.
    public static func enable() { on.store(true, ordering: .relaxed) }

    /// The span context of the caller, to carry to work that runs later (mail sent after the answer).
    public struct Parent: Sendable {
        let context: ServiceContext
    }

    public static func parent() -> Parent? {
        guard enabled, let context = ServiceContext.current else { return nil }
        return Parent(context: context)
    }

    /// Runs `body` in a span named `name`, a child of the current span (or of `parent`); `client` marks calls to
    /// another system (a database, a webhook receiver). Attribute values are never secrets: names, sizes, statuses.
    public static func span<T>(
        _ name: String, client: Bool = false, parent: Parent? = nil, attributes: @autoclosure () -> [String: String] = [:],
        _ body: () async throws -> T
    ) async rethrows -> T {
        guard enabled else { return try await body() }
        return try await withSpan(name, context: parent?.context ?? .current ?? .topLevel, ofKind: client ? .client : .internal) { span in
            for (key, value) in attributes() { span.attributes[key] = value }
            do {
                return try await body()
            } catch {
                span.recordError(error)
                throw error
            }
        }
    }

    /// The W3C trace context headers (`traceparent`, `tracestate`) of the current span, for an outgoing request.
    public static func outgoingHeaders() -> [(name: String, value: String)] {
        guard enabled, let context = ServiceContext.current else { return [] }
        var headers: [(name: String, value: String)] = []
        InstrumentationSystem.instrument.inject(context, into: &headers, using: Injector())
        return headers
    }

    struct Injector: Tracing.Injector {
        func inject(_ value: String, forKey key: String, into carrier: inout [(name: String, value: String)]) {
            carrier.append((key, value))
        }
    }
}
