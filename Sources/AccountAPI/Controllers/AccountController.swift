import Auth
import Hummingbird

/// The signed-in account itself: read, change, erase (`/api/user/me`).
struct AccountController: Sendable {
    let auth: AuthService
    let authenticator: Authenticator

    struct UpdateMeRequest: Decodable { let name: String?; let promptEnhancementEnabled: Bool? }
    struct DeleteMeRequest: Decodable { let password: String }
    struct EmailChangeRequest: Decodable { let newEmail: String; let currentPassword: String }
    struct CodeRequest: Decodable { let code: String }
    struct Message: Encodable, Sendable { var success = true; let message: String }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.get("/api/user/me", use: me)
        router.patch("/api/user/me", use: updateMe)
        router.delete("/api/user/me", use: deleteMe)
        router.post("/api/user/email", use: requestEmailChange)
        router.post("/api/user/email/verify", use: confirmEmailChange)
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

    /// 202 whatever the new address (no enumeration): a code goes to it, a notice to the current one.
    @Sendable func requestEmailChange(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<Message> {
        let session = try await authenticator.session(request, context)
        var request = request
        let body = try await request.decodeJSON(EmailChangeRequest.self, context: context)
        try await auth.requestEmailChange(
            session, newEmail: body.newEmail, currentPassword: body.currentPassword, client: context.client(request), logger: context.logger)
        return JSONResponse(
            Message(message: "A code is on its way to the new address; confirm it with POST /api/user/email/verify."), status: .accepted)
    }

    @Sendable func confirmEmailChange(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<User> {
        let session = try await authenticator.session(request, context)
        var request = request
        let body = try await request.decodeJSON(CodeRequest.self, context: context)
        return JSONResponse(try await auth.confirmEmailChange(session, code: body.code, client: context.client(request), logger: context.logger))
    }
}
