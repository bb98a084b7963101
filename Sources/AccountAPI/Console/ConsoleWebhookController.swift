import Auth
import Foundation
import Hummingbird
import Webhooks

/// Webhook endpoints in the console: each endpoint's deliveries with their tries, retry a delivery, send a test event,
/// rotate the signing secret — the service functions of `/api/admin/webhooks/…`.
struct ConsoleWebhookController: Sendable {
    let gate: ConsoleGate
    let pages: ConsolePages
    let webhooks: WebhookService
    let auth: AuthService

    static let pageSize = 25

    func addRoutes(to group: RouterGroup<AppRequestContext>) {
        group.get("webhooks", use: endpoints)
        group.get("webhooks/:id", use: endpoint)
        group.post("webhooks/:id/test", use: test)
        group.post("webhooks/:id/rotate-secret", use: rotate)
        group.post("webhooks/:id/deliveries/:deliveryId/retry", use: retry)
    }

    struct EndpointLine {
        let id: String; let url: String; let events: String; let state: String; let createdAt: String
        init(_ e: WebhookEndpoint) {
            (id, url, events, createdAt) = (e.id, e.url, e.events.joined(separator: ", "), ISODate.string(e.createdAt))
            state = e.disabledAt == nil ? "active" : "disabled (\(e.disabledReason ?? "by an operator"))"
        }
    }
    struct EndpointsView { let chrome: Chrome; let endpoints: [EndpointLine] }

    @Sendable func endpoints(_ request: Request, context: AppRequestContext) async throws -> Response {
        let op = try await gate.require(request, context)
        let list = try await webhooks.list(logger: context.logger).map(EndpointLine.init)
        return pages.page("webhooks", EndpointsView(chrome: Chrome("Webhooks", op), endpoints: list))
    }

    struct EndpointView { let chrome: Chrome; let csrf: String; let endpoint: EndpointLine; let deliveries: [DeliveryLine]; let next: String? }
    struct DeliveryLine {
        let id: String; let endpointId: String; let eventType: String; let status: String; let attempts: Int64; let lastResult: String
        let nextAttemptAt: String?; let createdAt: String; let tries: [TryLine]
    }
    struct TryLine { let attempt: Int64; let at: String; let result: String; let durationMilliseconds: Int64 }

    static func result(status: Int64?, error: String?) -> String {
        status.map { "HTTP \($0)" } ?? error ?? ""
    }

    /// The endpoint and its deliveries, newest first (25 a page, each with its tries).
    @Sendable func endpoint(_ request: Request, context: AppRequestContext) async throws -> Response {
        let op = try await gate.require(request, context)
        let id = try context.pathParameter("id")
        let endpoint = try await webhooks.endpoint(id: id, logger: context.logger)
        let parameters = request.uri.queryParameters
        let status = parameters["status"].flatMap { $0.isEmpty ? nil : String($0.prefix(20)) }
        let page = try await webhooks.deliveries(
            endpointID: id, status: status, limit: Self.pageSize, cursor: parameters["cursor"].map { String($0.prefix(100)) }, logger: context.logger)
        var lines: [DeliveryLine] = []
        for d in page.deliveries {
            let tries = try await webhooks.delivery(endpointID: id, id: d.id, logger: context.logger).1.map {
                TryLine(
                    attempt: $0.attempt, at: ISODate.string($0.at), result: Self.result(status: $0.statusCode, error: $0.error),
                    durationMilliseconds: $0.durationMilliseconds)
            }
            lines.append(
                DeliveryLine(
                    id: d.id, endpointId: id, eventType: d.eventType, status: d.status, attempts: d.attempts,
                    lastResult: Self.result(status: d.lastStatusCode, error: d.lastError), nextAttemptAt: d.nextAttemptAt.map(ISODate.string),
                    createdAt: ISODate.string(d.createdAt), tries: tries))
        }
        let next = page.nextCursor.map { ConsoleLinks.query("/console/webhooks/" + ConsoleLinks.segment(id), [("status", status), ("cursor", $0)]) }
        return pages.page(
            "webhook",
            EndpointView(chrome: Chrome("Webhook endpoint", op), csrf: op.csrf, endpoint: EndpointLine(endpoint), deliveries: lines, next: next))
    }

    func back(_ id: String) -> String { "/console/webhooks/" + ConsoleLinks.segment(id) }

    func result(
        _ title: String, _ lines: [String], secret: String? = nil, op: ConsoleOperator, back: String, backLabel: String, context: AppRequestContext
    ) async throws -> Response {
        try await pages.result(title, lines, secret: secret, op: op, auth: auth, back: back, backLabel: backLabel, logger: context.logger)
    }

    @Sendable func retry(_ request: Request, context: AppRequestContext) async throws -> Response {
        let op = try await gate.require(request, context)
        _ = try await gate.form(request, context, from: op)
        let id = try context.pathParameter("id")
        let delivery = try await webhooks.retry(
            endpointID: id, id: try context.pathParameter("deliveryId"), actor: op.actor, ip: context.clientIP, logger: context.logger)
        return try await result(
            "Delivery queued", ["\(delivery.eventType) (\(delivery.id)) is queued to be sent now; the retry window starts again."], op: op,
            back: back(id), backLabel: "Back to the endpoint", context: context)
    }

    @Sendable func test(_ request: Request, context: AppRequestContext) async throws -> Response {
        let op = try await gate.require(request, context)
        _ = try await gate.form(request, context, from: op)
        let id = try context.pathParameter("id")
        let delivery = try await webhooks.test(endpointID: id, actor: op.actor, ip: context.clientIP, logger: context.logger)
        return try await result(
            "Test event queued", ["A webhook.test event (\(delivery.id)) is queued to this endpoint."], op: op, back: back(id),
            backLabel: "Back to the endpoint", context: context)
    }

    @Sendable func rotate(_ request: Request, context: AppRequestContext) async throws -> Response {
        let op = try await gate.require(request, context)
        let authorise = try await gate.lastingAccessForm(request, context, from: op).authorise
        let id = try context.pathParameter("id")
        let (_, secret) = try await webhooks.rotateSecret(id: id, actor: op.actor, ip: context.clientIP, authorise: authorise, logger: context.logger)
        return try await result(
            "Secret rotated", ["The endpoint signs with the new secret now; the old one keeps verifying for a while (see docs/webhooks.md)."],
            secret: secret, op: op, back: back(id), backLabel: "Back to the endpoint", context: context)
    }
}
