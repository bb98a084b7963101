import Entitlements
import Foundation
import Hummingbird
import Logging
import NIOCore
import Storage

/// Public routes: liveness, readiness, the contract and the plan catalog.
struct SystemRoutes: Sendable {
    let database: any Database
    let catalog: PlanCatalog

    func register(on router: Router<AppRequestContext>) {
        router.get("/health") { _, _ in JSONResponse(["status": "ok"]) }
        router.get("/ready") { _, context in try await ready(context: context) }
        router.get("/openapi.yaml") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "application/yaml; charset=utf-8", .cacheControl: "public, max-age=300"],
                body: .init(byteBuffer: ByteBuffer(string: OpenAPISpec.yaml)))
        }
        router.get("/api/subscription-plans") { _, _ in
            var response = JSONResponse(catalog.activePlans)
            response.headers[.cacheControl] = "public, max-age=300"
            return response
        }
    }

    /// 200 when the database answers within 2 s, else a 503 problem.
    func ready(context: AppRequestContext) async throws -> JSONResponse<[String: String]> {
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await database.ping(timeoutSeconds: 2, logger: context.logger) }
                group.addTask {
                    try await Task.sleep(for: .seconds(2))
                    throw StorageError.unavailable("ping timed out")
                }
                try await group.next()
                group.cancelAll()
            }
        } catch {
            context.logger.warning("readiness check failed", metadata: ["error": "\(error)"])
            throw Problem.unavailable("The database is not reachable.")
        }
        return JSONResponse(["status": "ready", "database": database.engine.rawValue])
    }
}
