import Auth
import Hummingbird

/// The signed-in account itself: read, change, erase (`/api/user/me`).
struct AccountController: Sendable {
    let auth: AuthService
    let authenticator: Authenticator

    struct UpdateMeRequest: Decodable { let name: String?; let promptEnhancementEnabled: Bool? }
    struct DeleteMeRequest: Decodable { let password: String }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.get("/api/user/me", use: me)
        router.patch("/api/user/me", use: updateMe)
        router.delete("/api/user/me", use: deleteMe)
    }

    @Sendable func me(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<User> {
        JSONResponse(try await authenticator.session(request, context).user)
    }

    @Sendable func updateMe(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<User> {
        let session = try await authenticator.session(request, context)
        var request = request
        let body = try await request.decodeJSON(UpdateMeRequest.self, context: context)
        return JSONResponse(
            try await auth.updateMe(session, name: body.name, promptEnhancementEnabled: body.promptEnhancementEnabled, logger: context.logger))
    }

    @Sendable func deleteMe(_ request: Request, context: AppRequestContext) async throws -> Response {
        let session = try await authenticator.session(request, context)
        var request = request
        let body = try await request.decodeJSON(DeleteMeRequest.self, context: context)
        try await auth.deleteMe(session, password: body.password, client: context.client(request), logger: context.logger)
        return Response(status: .noContent)
    }
}
