import Auth
import Entitlements
import Hummingbird

/// Family profiles of the signed-in account (seed 004 paths).
struct ProfileController: Sendable {
    let profiles: ProfileService
    let entitlements: EntitlementService
    let authenticator: Authenticator

    struct SelectRequest: Decodable { let profileId: String; let pin: String? }
    struct SelectResponse: Encodable, Sendable { let success: Bool; let message: String; let selectedProfile: ProfileJSON }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.get("/api/profiles/available", use: available)
        router.post("/api/profiles/select", use: select)
        router.post("/api/family-profiles", use: create)
        router.put("/api/family-profiles/:id", use: update)
        router.delete("/api/family-profiles/:id", use: delete)
        router.get("/api/family-profiles/:id/usage", use: usage)
    }

    /// The profile's allowance and usage this period: the owner reads every profile's, a profile only its own.
    @Sendable func usage(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<ProfileUsageJSON> {
        let session = try await authenticator.session(request, context)
        let profileID = try context.pathParameter("id")
        let current = try await authenticator.profile(of: session, context)
        if current == .selectionRequired { throw AuthError.profileSelectionRequired }
        guard current.maySeeUsage(of: profileID) else {
            throw AuthError.forbidden("A profile sees only its own usage; the owner's profile sees every profile's.")
        }
        return JSONResponse(
            ProfileUsageJSON(try await entitlements.profileUsage(userID: session.user.id, profileID: profileID, logger: context.logger)))
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
