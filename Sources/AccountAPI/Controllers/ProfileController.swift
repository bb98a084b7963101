import Auth
import Hummingbird

/// Family profiles of the signed-in account (seed 004 paths).
struct ProfileController: Sendable {
    let profiles: ProfileService
    let authenticator: Authenticator

    struct SelectRequest: Decodable { let profileId: String; let pin: String? }
    struct SelectResponse: Encodable, Sendable { let success: Bool; let message: String; let selectedProfile: ProfileJSON }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.get("/api/profiles/available", use: available)
        router.post("/api/profiles/select", use: select)
        router.post("/api/family-profiles", use: create)
        router.put("/api/family-profiles/:id", use: update)
        router.delete("/api/family-profiles/:id", use: delete)
    }

    @Sendable func available(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<[ProfileJSON]> {
        let session = try await authenticator.session(request, context)
        return JSONResponse(try await profiles.available(userID: session.user.id, logger: context.logger).map(ProfileJSON.init))
    }

    @Sendable func select(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<SelectResponse> {
        let session = try await authenticator.session(request, context)
        var request = request
        let body = try await request.decodeJSON(SelectRequest.self, context: context)
        let profile = try await profiles.select(session, profileID: body.profileId, pin: body.pin, logger: context.logger)
        return JSONResponse(SelectResponse(success: true, message: "Profile selected.", selectedProfile: ProfileJSON(profile)))
    }

    @Sendable func create(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<ProfileJSON> {
        let session = try await authenticator.session(request, context)
        var request = request
        let body = try await request.decodeJSON(ProfileRequest.self, context: context)
        let profile = try await profiles.create(
            userID: session.user.id, input: body.input, by: .owner(session, currentPassword: body.currentPassword), logger: context.logger)
        return JSONResponse(ProfileJSON(profile), status: .created)
    }

    @Sendable func update(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<ProfileJSON> {
        let session = try await authenticator.session(request, context)
        var request = request
        let body = try await request.decodeJSON(ProfileRequest.self, context: context)
        let profile = try await profiles.update(
            userID: session.user.id, profileID: try context.pathParameter("id"), input: body.input,
            by: .owner(session, currentPassword: body.currentPassword), logger: context.logger)
        return JSONResponse(ProfileJSON(profile))
    }

    @Sendable func delete(_ request: Request, context: AppRequestContext) async throws -> Response {
        let session = try await authenticator.session(request, context)
        try await profiles.delete(
            userID: session.user.id, profileID: try context.pathParameter("id"), by: .owner(session, currentPassword: nil),
            logger: context.logger)
        return Response(status: .noContent)
    }
}
