import Auth
import Foundation
import HTTPTypes
import Hummingbird

/// Sign-up, codes, sign-in, sessions and passwords (paths as in seed 004 and DESIGN.md).
struct AuthController: Sendable {
    let auth: AuthService
    let authenticator: Authenticator

    // Request bodies: the seed's structs, plus the neighbours it implies.
    struct SignUpRequest: Decodable { let email: String; let password: String; let name: String }
    struct VerifyOTPRequest: Decodable { let email: String; let code: String }
    struct EmailRequest: Decodable { let email: String }
    struct SignInRequest: Decodable { let email: String; let password: String }
    struct ResetPasswordRequest: Decodable { let email: String; let code: String; let newPassword: String }
    struct ChangePasswordRequest: Decodable { let currentPassword: String; let newPassword: String }
    struct ReauthenticateRequest: Decodable { let password: String; let code: String?; let recoveryCode: String? }

    // Responses.
    struct Message: Encodable, Sendable { var success = true; let message: String }
    struct ReauthenticatedResponse: Encodable, Sendable { var success = true; let message: String; let recentUntil: String }
    struct SignUpResponse: Encodable, Sendable { let success: Bool; let message: String; let requiresVerification: Bool }
    struct VerifyOTPResponse: Encodable, Sendable {
        let success: Bool; let message: String; let user: User; let welcomeTokens: Int; let session: SessionJSON
    }
    struct CurrentSessionJSON: Encodable, Sendable { let id: String; let createdAt: String; let lastUsedAt: String; let expiresAt: String }
    /// `selectedProfile`: the profile the session selected, while it is usable; `profileSelectionRequired`: the selection was
    /// deleted or locked by a downgrade, and the app must let the user select again.
    struct SessionResponse: Encodable, Sendable {
        let user: User; let session: CurrentSessionJSON; let selectedProfile: FamilyProfile?; let profileSelectionRequired: Bool
    }

    static let signUpMessage = "If the address can be used, a verification code is on its way. Enter it to finish signing up."

    func addRoutes(to router: Router<AppRequestContext>) {
        router.post("/api/auth/sign-up", use: signUp)
        router.post("/api/verify-otp", use: verifyOTP)
        router.post("/api/auth/resend-otp", use: resendOTP)
        router.post("/api/auth/sign-in", use: signIn)
        router.post("/api/auth/sign-out", use: signOut)
        router.get("/api/auth/session", use: session)
        router.get("/api/auth/sessions", use: sessions)
        router.delete("/api/auth/sessions/:id", use: revokeSession)
        router.post("/api/auth/forgot-password", use: forgotPassword)
        router.post("/api/auth/reset-password", use: resetPassword)
        router.post("/api/auth/change-password", use: changePassword)
        router.post("/api/auth/reauthenticate", use: reauthenticate)
    }

    @Sendable func signUp(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<SignUpResponse> {
        var request = request
        let body = try await request.decodeJSON(SignUpRequest.self, context: context)
        try await auth.signUp(email: body.email, password: body.password, name: body.name, client: context.client(request), logger: context.logger)
        return JSONResponse(SignUpResponse(success: true, message: Self.signUpMessage, requiresVerification: true))
    }

    @Sendable func verifyOTP(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<VerifyOTPResponse> {
        var request = request
        let body = try await request.decodeJSON(VerifyOTPRequest.self, context: context)
        let result = try await auth.verifyEmail(email: body.email, code: body.code, client: context.client(request), logger: context.logger)
        return JSONResponse(
            VerifyOTPResponse(
                success: true, message: "Email verified.", user: result.user, welcomeTokens: result.welcomeTokens,
                session: SessionJSON(result.session)))
    }

    @Sendable func resendOTP(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<Message> {
        var request = request
        let body = try await request.decodeJSON(EmailRequest.self, context: context)
        try await auth.resendCode(email: body.email, logger: context.logger)
        return JSONResponse(Message(message: "If the address is waiting for verification, a new code is on its way."))
    }

    /// The sign-in body, or with two-factor codes on `{mfaRequired: true, mfaToken, expiresAt}` (no session yet).
    @Sendable func signIn(_ request: Request, context: AppRequestContext) async throws -> Response {
        var request = request
        let body = try await request.decodeJSON(SignInRequest.self, context: context)
        switch try await auth.signIn(email: body.email, password: body.password, client: context.client(request), logger: context.logger) {
        case .session(let user, let session):
            return try JSONResponse(SignInResponse(user: user, session: SessionJSON(session))).response(from: request, context: context)
        case .mfaRequired(let token, let expiresAt):
            return try JSONResponse(MFAChallengeJSON(mfaToken: token, expiresAt: ISODate.string(expiresAt))).response(
                from: request, context: context)
        }
    }

    @Sendable func signOut(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<Message> {
        let session = try await authenticator.session(request, context)
        try await auth.signOut(session, client: context.client(request), logger: context.logger)
        return JSONResponse(Message(message: "Signed out."))
    }

    @Sendable func session(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<SessionResponse> {
        let session = try await authenticator.session(request, context)
        let profile = try await authenticator.profile(of: session, context)
        let current = CurrentSessionJSON(
            id: session.sessionID, createdAt: ISODate.string(session.createdAt), lastUsedAt: ISODate.string(session.lastUsedAt),
            expiresAt: ISODate.string(session.expiresAt))
        let selected: FamilyProfile? = if case .selected(let p) = profile { p } else { nil }
        return JSONResponse(
            SessionResponse(user: session.user, session: current, selectedProfile: selected, profileSelectionRequired: profile == .selectionRequired))
    }

    @Sendable func sessions(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<SessionsResponse> {
        let session = try await authenticator.session(request, context)
        return JSONResponse(SessionsResponse(sessions: try await auth.listSessions(of: session, logger: context.logger).map(SessionSummaryJSON.init)))
    }

    @Sendable func revokeSession(_ request: Request, context: AppRequestContext) async throws -> Response {
        let session = try await authenticator.session(request, context)
        try await auth.revokeSession(id: try context.pathParameter("id"), of: session, client: context.client(request), logger: context.logger)
        return Response(status: .noContent)
    }

    @Sendable func forgotPassword(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<Message> {
        var request = request
        let body = try await request.decodeJSON(EmailRequest.self, context: context)
        try await auth.forgotPassword(email: body.email, client: context.client(request), logger: context.logger)
        return JSONResponse(Message(message: "If an account uses this address, a reset code is on its way."))
    }

    @Sendable func resetPassword(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<Message> {
        var request = request
        let body = try await request.decodeJSON(ResetPasswordRequest.self, context: context)
        try await auth.resetPassword(
            email: body.email, code: body.code, newPassword: body.newPassword, client: context.client(request), logger: context.logger)
        return JSONResponse(Message(message: "Password changed; every session was signed out. Sign in with the new password."))
    }

    @Sendable func changePassword(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<Message> {
        let session = try await authenticator.session(request, context)
        var request = request
        let body = try await request.decodeJSON(ChangePasswordRequest.self, context: context)
        try await auth.changePassword(
            session, currentPassword: body.currentPassword, newPassword: body.newPassword, client: context.client(request), logger: context.logger)
        return JSONResponse(Message(message: "Password changed; your other sessions were signed out."))
    }

    /// Confirms the password behind the session, which makes its authentication recent (see `AuthService+presence`).
    @Sendable func reauthenticate(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<ReauthenticatedResponse> {
        let session = try await authenticator.session(request, context)
        var request = request
        let body = try await request.decodeJSON(ReauthenticateRequest.self, context: context)
        let factor = try SecondFactor.from(code: body.code, recoveryCode: body.recoveryCode, required: false)
        let until = try await auth.reauthenticate(
            session, password: body.password, factor: factor, client: context.client(request), logger: context.logger)
        return JSONResponse(ReauthenticatedResponse(message: "Password confirmed.", recentUntil: ISODate.string(until)))
    }
}

extension Optional where Wrapped: Sendable {
    func asyncMap<T>(_ transform: (Wrapped) async throws -> T) async rethrows -> T? {
        guard let value = self else { return nil }
        return try await transform(value)
    }
}
