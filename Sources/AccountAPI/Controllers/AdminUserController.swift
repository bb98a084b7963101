import Auth
import Foundation
import Hummingbird

/// Operators find users and manage their family profiles. Every change is audited.
struct AdminUserController: Sendable {
    let auth: AuthService
    let profiles: ProfileService
    let authenticator: Authenticator

    struct UsersResponse: Encodable, Sendable {
        let users: [AdminUserJSON]
        var nextCursor: String? = nil
    }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.get("/api/admin/users", use: users)
        router.get("/api/admin/users/:userId", use: user)
        router.get("/api/admin/users/:userId/profiles", use: userProfiles)
        router.post("/api/admin/users/:userId/profiles", use: createProfile)
        router.put("/api/admin/users/:userId/profiles/:id", use: updateProfile)
        router.delete("/api/admin/users/:userId/profiles/:id", use: deleteProfile)
        router.post("/api/admin/users/:userId/profiles/:id/reset-pin", use: resetPIN)
        router.delete("/api/admin/users/:userId/mfa", use: resetMFA)
        router.post("/api/admin/users/:userId/erase", use: erase)
        router.get("/api/admin/users/:userId/sessions", use: sessions)
        router.delete("/api/admin/users/:userId/sessions", use: revokeAllSessions)
        router.delete("/api/admin/users/:userId/sessions/:id", use: revokeSession)
    }

    struct EraseRequest: Decodable { let confirm: String }

    /// Erases the account (as its owner can), after the operator typed its email address in `confirm`.
    @Sendable func erase(_ request: Request, context: AppRequestContext) async throws -> Response {
        let actor = try await authenticator.requireOperator(request, context)
        let userID = try context.pathParameter("userId")
        var request = request
        let body = try await request.decodeJSON(EraseRequest.self, context: context)
        try await auth.eraseByOperator(userID: userID, confirmation: body.confirm, actor: actor, ip: context.clientIP, logger: context.logger)
        return Response(status: .noContent)
    }

    /// The user's live sessions (apps and the operator console).
    @Sendable func sessions(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<SessionsResponse> {
        _ = try await authenticator.requireOperator(request, context)
        let userID = try await authenticator.existingUser(context)
        let listed = try await auth.sessions(ofUser: userID, logger: context.logger)
        return JSONResponse(SessionsResponse(sessions: listed.map(SessionSummaryJSON.init)))
    }

    /// Signs the user out everywhere.
    @Sendable func revokeAllSessions(_ request: Request, context: AppRequestContext) async throws -> Response {
        try await revokeSessions(request, context, one: nil)
    }

    /// Revokes one session; 404 when it is not a live session of this user.
    @Sendable func revokeSession(_ request: Request, context: AppRequestContext) async throws -> Response {
        try await revokeSessions(request, context, one: try context.pathParameter("id"))
    }

    func revokeSessions(_ request: Request, _ context: AppRequestContext, one: String?) async throws -> Response {
        let actor = try await authenticator.requireOperator(request, context)
        let userID = try await authenticator.existingUser(context)
        guard try await auth.revokeSessions(ofUser: userID, sessionID: one, actor: actor, ip: context.clientIP, logger: context.logger) else {
            throw Problem.notFound("This user has no live session by that id.")
        }
        return Response(status: .noContent)
    }

    @Sendable func users(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<UsersResponse> {
        _ = try await authenticator.requireOperator(request, context)
        let parameters = request.uri.queryParameters
        let limit = parameters["limit"].flatMap { Int(String($0)) } ?? 50
        if let query = parameters["query"].map(String.init) {
            let found = try await auth.searchUsers(query: query, cursor: parameters["cursor"].map(String.init), limit: limit, logger: context.logger)
            return JSONResponse(UsersResponse(users: found.users.map(AdminUserJSON.init), nextCursor: found.nextCursor))
        }
        let email = parameters["email"].map(String.init)
        return JSONResponse(
            UsersResponse(users: try await auth.findUsers(email: email, limit: limit, logger: context.logger).map(AdminUserJSON.init)))
    }

    @Sendable func user(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<AdminUserJSON> {
        _ = try await authenticator.requireOperator(request, context)
        return JSONResponse(AdminUserJSON(try await auth.findUser(id: try context.pathParameter("userId"), logger: context.logger)))
    }

    @Sendable func userProfiles(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<[ProfileJSON]> {
        _ = try await authenticator.requireOperator(request, context)
        let userID = try await authenticator.existingUser(context)
        return JSONResponse(try await profiles.available(userID: userID, logger: context.logger).map(ProfileJSON.init))
    }

    @Sendable func createProfile(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<ProfileJSON> {
        let actor = try await authenticator.requireOperator(request, context)
        let userID = try await authenticator.existingUser(context)
        var request = request
        let body = try await request.decodeJSON(ProfileRequest.self, context: context)
        let profile = try await profiles.create(
            userID: userID, input: body.input, by: .operatorActor(actor, ip: context.clientIP), logger: context.logger)
        return JSONResponse(ProfileJSON(profile), status: .created)
    }

    @Sendable func updateProfile(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<ProfileJSON> {
        let actor = try await authenticator.requireOperator(request, context)
        let userID = try await authenticator.existingUser(context)
        var request = request
        let body = try await request.decodeJSON(ProfileRequest.self, context: context)
        let profile = try await profiles.update(
            userID: userID, profileID: try context.pathParameter("id"), input: body.input, by: .operatorActor(actor, ip: context.clientIP),
            logger: context.logger)
        return JSONResponse(ProfileJSON(profile))
    }

    @Sendable func deleteProfile(_ request: Request, context: AppRequestContext) async throws -> Response {
        let actor = try await authenticator.requireOperator(request, context)
        let userID = try await authenticator.existingUser(context)
        try await profiles.delete(
            userID: userID, profileID: try context.pathParameter("id"), by: .operatorActor(actor, ip: context.clientIP), logger: context.logger)
        return Response(status: .noContent)
    }

    @Sendable func resetPIN(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<ProfileJSON> {
        let actor = try await authenticator.requireOperator(request, context)
        let userID = try await authenticator.existingUser(context)
        let profile = try await profiles.resetPIN(
            userID: userID, profileID: try context.pathParameter("id"), by: .operatorActor(actor, ip: context.clientIP), logger: context.logger)
        return JSONResponse(ProfileJSON(profile))
    }

    /// Clears the user's two-factor codes (lost app and recovery codes); 404 when there were none.
    /// Clearing someone's second factor weakens their account for good: lasting access, as an API key is.
    @Sendable func resetMFA(_ request: Request, context: AppRequestContext) async throws -> Response {
        let access = try await authenticator.operatorMakingAccess(request, context)
        let userID = try await authenticator.existingUser(context)
        guard try await auth.resetTOTP(userID: userID, actor: access.actor, ip: context.clientIP, authorise: access.authorise, logger: context.logger)
        else {
            throw Problem.notFound("This user has no two-factor codes.")
        }
        return Response(status: .noContent)
    }
}
