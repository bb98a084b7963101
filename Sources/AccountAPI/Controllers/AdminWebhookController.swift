import Auth
import Foundation
import Hummingbird
import Webhooks

/// Operators manage webhook endpoints and their deliveries (`/api/admin/webhooks`). Secrets are shown once.
struct AdminWebhookController: Sendable {
    let webhooks: WebhookService
    let authenticator: Authenticator

    /// Create and PATCH bodies: on PATCH an absent field stays as it is, `null` clears `description` or `balanceLowThreshold`.
    struct EndpointRequest: Decodable {
        let input: WebhookEndpointInput

        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: Keys.self)
            var input = WebhookEndpointInput()
            input.url = try c.decodeIfPresent(String.self, forKey: .url)
            input.events = try c.decodeIfPresent([String].self, forKey: .events)
            input.enabled = try c.decodeIfPresent(Bool.self, forKey: .enabled)
            if c.contains(.description) { input.description = .some(try c.decodeIfPresent(String.self, forKey: .description)) }
            if c.contains(.balanceLowThreshold) { input.balanceLowThreshold = .some(try c.decodeIfPresent(Int64.self, forKey: .balanceLowThreshold)) }
            self.input = input
        }

        enum Keys: String, CodingKey { case url, events, description, balanceLowThreshold, enabled }
    }

    struct EndpointsJSON: Encodable, Sendable { let endpoints: [WebhookEndpointJSON] }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.post("/api/admin/webhooks", use: create)
        router.get("/api/admin/webhooks", use: list)
        router.get("/api/admin/webhooks/:id", use: get)
        router.patch("/api/admin/webhooks/:id", use: update)
        router.delete("/api/admin/webhooks/:id", use: delete)
        router.post("/api/admin/webhooks/:id/rotate-secret", use: rotate)
        router.post("/api/admin/webhooks/:id/test", use: test)
        router.get("/api/admin/webhooks/:id/deliveries", use: deliveries)
        router.get("/api/admin/webhooks/:id/deliveries/:deliveryId", use: delivery)
        router.post("/api/admin/webhooks/:id/deliveries/:deliveryId/retry", use: retry)
    }

    @Sendable func create(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<WebhookEndpointWithSecretJSON> {
        let access = try await authenticator.operatorMakingAccess(request, context)
        var request = request
        let body = try await request.decodeJSON(EndpointRequest.self, context: context)
        if body.input.enabled == false { throw Problem.validation("A new endpoint is enabled; turn it off with PATCH afterwards.") }
        let (endpoint, secret) = try await webhooks.create(
            body.input, actor: access.actor, ip: context.clientIP, authorise: access.authorise, logger: context.logger)
        return JSONResponse(WebhookEndpointWithSecretJSON(endpoint: WebhookEndpointJSON(endpoint), secret: secret), status: .created)
    }

    @Sendable func list(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<EndpointsJSON> {
        _ = try await authenticator.requireOperator(request, context)
        return JSONResponse(EndpointsJSON(endpoints: try await webhooks.list(logger: context.logger).map(WebhookEndpointJSON.init)))
    }

    @Sendable func get(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<WebhookEndpointJSON> {
        _ = try await authenticator.requireOperator(request, context)
        return JSONResponse(WebhookEndpointJSON(try await webhooks.endpoint(id: try context.pathParameter("id"), logger: context.logger)))
    }

    /// Pointing an endpoint at another URL, choosing its events or turning it back on changes what is sent where: lasting
    /// access, as a new endpoint is.
    @Sendable func update(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<WebhookEndpointJSON> {
        let actor = try await authenticator.requireOperator(request, context)
        var request = request
        let body = try await request.decodeJSON(EndpointRequest.self, context: context)
        let input = body.input
        var authorise: WebhookService.Authorisation = { _ in }
        if input.url != nil || input.events != nil || input.enabled == true {
            authorise = try await authenticator.operatorMakingAccess(request, context).authorise
        }
        let endpoint = try await webhooks.update(
            id: try context.pathParameter("id"), input, actor: actor, ip: context.clientIP, authorise: authorise, logger: context.logger)
        return JSONResponse(WebhookEndpointJSON(endpoint))
    }

    @Sendable func delete(_ request: Request, context: AppRequestContext) async throws -> Response {
        let actor = try await authenticator.requireOperator(request, context)
        guard try await webhooks.delete(id: try context.pathParameter("id"), actor: actor, ip: context.clientIP, logger: context.logger) else {
            throw WebhookError.notFound
        }
        return Response(status: .noContent)
    }

    @Sendable func rotate(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<WebhookEndpointWithSecretJSON> {
        let access = try await authenticator.operatorMakingAccess(request, context)
        let (endpoint, secret) = try await webhooks.rotateSecret(
            id: try context.pathParameter("id"), actor: access.actor, ip: context.clientIP, authorise: access.authorise, logger: context.logger)
        return JSONResponse(WebhookEndpointWithSecretJSON(endpoint: WebhookEndpointJSON(endpoint), secret: secret))
    }

    @Sendable func test(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<WebhookDeliveryJSON> {
        let actor = try await authenticator.requireOperator(request, context)
        let delivery = try await webhooks.test(
            endpointID: try context.pathParameter("id"), actor: actor, ip: context.clientIP, logger: context.logger)
        return JSONResponse(WebhookDeliveryJSON(delivery), status: .accepted)
    }

    @Sendable func deliveries(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<WebhookDeliveriesJSON> {
        _ = try await authenticator.requireOperator(request, context)
        let query = request.uri.queryParameters
        let limit = try query["limit"].map { raw -> Int in
            guard let n = Int(String(raw)), (1...WebhookService.deliveriesPageMax).contains(n) else {
                throw Problem.validation("Query 'limit' must be a whole number from 1 to \(WebhookService.deliveriesPageMax).")
            }
            return n
        }
        let page = try await webhooks.deliveries(
            endpointID: try context.pathParameter("id"), status: query["status"].map(String.init), limit: limit ?? 50,
            cursor: query["cursor"].map(String.init), logger: context.logger)
        return JSONResponse(WebhookDeliveriesJSON(deliveries: page.deliveries.map { WebhookDeliveryJSON($0) }, nextCursor: page.nextCursor))
    }

    @Sendable func delivery(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<WebhookDeliveryJSON> {
        _ = try await authenticator.requireOperator(request, context)
        let (delivery, attempts) = try await webhooks.delivery(
            endpointID: try context.pathParameter("id"), id: try context.pathParameter("deliveryId"), logger: context.logger)
        return JSONResponse(WebhookDeliveryJSON(delivery, attempts: attempts))
    }

    @Sendable func retry(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<WebhookDeliveryJSON> {
        let actor = try await authenticator.requireOperator(request, context)
        let delivery = try await webhooks.retry(
            endpointID: try context.pathParameter("id"), id: try context.pathParameter("deliveryId"), actor: actor, ip: context.clientIP,
            logger: context.logger)
        return JSONResponse(WebhookDeliveryJSON(delivery), status: .accepted)
    }
}
