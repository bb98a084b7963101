import Entitlements
import Foundation
import Hummingbird
import Logging
import NIOCore
import Storage

/// Public routes: liveness, readiness, the contract and the plan catalog.
struct SystemController: Sendable {
    let database: any Database
    let catalog: PlanCatalog
    let drain: DrainState

    func addRoutes(to router: Router<AppRequestContext>) {
        router.get("/health", use: health)
        router.get("/ready", use: ready)
        router.get("/openapi.yaml", use: openAPI)
        router.get("/api/subscription-plans", use: plans)
        router.get("/api/pricing", use: pricing)
    }

    @Sendable func health(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<[String: String]> {
        JSONResponse(["status": "ok"])
    }

    /// 200 when the database answers within 2 s, else a 503 problem; 503 too while the node drains (SIGTERM).
    @Sendable func ready(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<[String: String]> {
        if drain.isDraining { throw Problem.unavailable("This node is shutting down.", retryAfterSeconds: 1) }
        do {
            return JSONResponse(["status": "ready", "database": try await database.readiness(timeoutSeconds: 2, logger: context.logger)])
        } catch {
            context.logger.warning("readiness check failed", metadata: ["error": .error(error)])
            throw Problem.unavailable("The database is not reachable.")
        }
    }

    @Sendable func openAPI(_ request: Request, context: AppRequestContext) async throws -> Response {
        Response(
            status: .ok, headers: [.contentType: "application/yaml; charset=utf-8", .cacheControl: "public, max-age=300"],
            body: .init(byteBuffer: ByteBuffer(string: OpenAPISpec.yaml)))
    }

    @Sendable func plans(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<[SubscriptionPlan]> {
        var response = JSONResponse(catalog.activePlans)
        response.headers[.cacheControl] = "public, max-age=300"
        return response
    }

    /// The rate card: every priced action, its price per unit, its attributes and the plans that may choose each value.
    @Sendable func pricing(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<[String: [PricedAction]]> {
        var response = JSONResponse(["actions": catalog.pricedActions])
        response.headers[.cacheControl] = "public, max-age=300"
        return response
    }
}
