import Auth
import Foundation
import HTTPTypes
import Hummingbird

/// Sign-up, codes, sign-in, sessions, passwords and the account (paths as in seed 004 and DESIGN.md).
struct AuthRoutes: Sendable {
    let auth: AuthService
    let authenticator: Authenticator

    // Request bodies: the seed's structs, plus the neighbours it implies.
    struct SignUpRequest: Decodable { let email: String; let password: String; let name: String }
    struct VerifyOTPRequest: Decodable { let email: String; let code: String }
    struct EmailRequest: Decodable { let email: String }
    struct SignInRequest: Decodable { let email: String; let password: String }
    struct ResetPasswordRequest: Decodable { let email: String; let code: String; let newPassword: String }
    struct ChangePasswordRequest: Decodable { let currentPassword: String; let newPassword: String }
    struct UpdateMeRequest: Decodable { let name: String?; let promptEnhancementEnabled: Bool? }
    struct DeleteMeRequest: Decodable { let password: String }

    // Responses.
    struct Message: Encodable, Sendable { var success = true; let message: String }
    struct SignUpResponse: Encodable, Sendable { let success: Bool; let message: String; let requiresVerification: Bool }
    struct SessionJSON: Encodable, Sendable { let id: String; let token: String; let expiresAt: String }
    struct VerifyOTPResponse: Encodable, Sendable {
        let success: Bool; let message: String; let user: User; let welcomeTokens: Int; let session: SessionJSON
    }
    struct SignInResponse: Encodable, Sendable { let user: User; let session: SessionJSON }
    struct CurrentSessionJSON: Encodable, Sendable { let id: String; let createdAt: String; let lastUsedAt: String; let expiresAt: String }
    struct SessionResponse: Encodable, Sendable { let user: User; let session: CurrentSessionJSON; let selectedProfile: FamilyProfile? }
    struct SessionsResponse: Encodable, Sendable { let sessions: [SessionSummaryJSON] }
    struct SessionSummaryJSON: Encodable, Sendable {
        let id: String; let createdAt: String; let lastUsedAt: String; let expiresAt: String; let userAgent: String?; let ip: String?
        let current: Bool
    }

    static let signUpMessage = "If the address can be used, a verification code is on its way. Enter it to finish signing up."

    func register(on router: Router<AppRequestContext>) {
        router.post("/api/auth/sign-up") { request, context in
            var request = request
            let body = try await request.decodeJSON(SignUpRequest.self, context: context)
            try await auth.signUp(email: body.email, password: body.password, name: body.name, client: client(request, context), logger: context.logger)
            return JSONResponse(SignUpResponse(success: true, message: Self.signUpMessage, requiresVerification: true))
        }
        router.post("/api/verify-otp") { request, context in
            var request = request
            let body = try await request.decodeJSON(VerifyOTPRequest.self, context: context)
            let result = try await auth.verifyEmail(email: body.email, code: body.code, client: client(request, context), logger: context.logger)
            return JSONResponse(
                VerifyOTPResponse(
                    success: true, message: "Email verified.", user: result.user, welcomeTokens: result.welcomeTokens,
                    session: Self.json(result.session)))
        }
        router.post("/api/auth/resend-otp") { request, context in
            var request = request
            let body = try await request.decodeJSON(EmailRequest.self, context: context)
            try await auth.resendCode(email: body.email, logger: context.logger)
            return JSONResponse(Message(message: "If the address is waiting for verification, a new code is on its way."))
        }
        router.post("/api/auth/sign-in") { request, context in
            var request = request
            let body = try await request.decodeJSON(SignInRequest.self, context: context)
            let (user, session) = try await auth.signIn(
                email: body.email, password: body.password, client: client(request, context), logger: context.logger)
            return JSONResponse(SignInResponse(user: user, session: Self.json(session)))
        }
        router.post("/api/auth/sign-out") { request, context in
            let session = try await authenticate(request, context)
            try await auth.signOut(session, client: client(request, context), logger: context.logger)
            return JSONResponse(Message(message: "Signed out."))
        }
        router.get("/api/auth/session") { request, context in
            let session = try await authenticate(request, context)
            let profile = try await session.selectedProfileID.asyncMap { try await auth.profile(id: $0, userID: session.user.id, logger: context.logger) }
            return JSONResponse(
                SessionResponse(
                    user: session.user,
                    session: CurrentSessionJSON(
                        id: session.sessionID, createdAt: Self.iso(session.createdAt), lastUsedAt: Self.iso(session.lastUsedAt),
                        expiresAt: Self.iso(session.expiresAt)), selectedProfile: profile ?? nil))
        }
        router.get("/api/auth/sessions") { request, context in
            let session = try await authenticate(request, context)
            let sessions = try await auth.listSessions(of: session, logger: context.logger).map {
                SessionSummaryJSON(
                    id: $0.id, createdAt: Self.iso($0.createdAt), lastUsedAt: Self.iso($0.lastUsedAt), expiresAt: Self.iso($0.expiresAt),
                    userAgent: $0.userAgent, ip: $0.ip, current: $0.current)
            }
            return JSONResponse(SessionsResponse(sessions: sessions))
        }
        router.delete("/api/auth/sessions/:id") { request, context in
            let session = try await authenticate(request, context)
            let id = try context.parameters.require("id")
            try await auth.revokeSession(id: id, of: session, client: client(request, context), logger: context.logger)
            return Response(status: .noContent)
        }
        router.post("/api/auth/forgot-password") { request, context in
            var request = request
            let body = try await request.decodeJSON(EmailRequest.self, context: context)
            try await auth.forgotPassword(email: body.email, client: client(request, context), logger: context.logger)
            return JSONResponse(Message(message: "If an account uses this address, a reset code is on its way."))
        }
        router.post("/api/auth/reset-password") { request, context in
            var request = request
            let body = try await request.decodeJSON(ResetPasswordRequest.self, context: context)
            try await auth.resetPassword(
                email: body.email, code: body.code, newPassword: body.newPassword, client: client(request, context), logger: context.logger)
            return JSONResponse(Message(message: "Password changed; every session was signed out. Sign in with the new password."))
        }
        router.post("/api/auth/change-password") { request, context in
            let session = try await authenticate(request, context)
            var request = request
            let body = try await request.decodeJSON(ChangePasswordRequest.self, context: context)
            try await auth.changePassword(
                session, currentPassword: body.currentPassword, newPassword: body.newPassword, client: client(request, context), logger: context.logger)
            return JSONResponse(Message(message: "Password changed; your other sessions were signed out."))
        }
        router.get("/api/user/me") { request, context in
            JSONResponse(try await authenticate(request, context).user)
        }
        router.patch("/api/user/me") { request, context in
            let session = try await authenticate(request, context)
            var request = request
            let body = try await request.decodeJSON(UpdateMeRequest.self, context: context)
            return JSONResponse(
                try await auth.updateMe(session, name: body.name, promptEnhancementEnabled: body.promptEnhancementEnabled, logger: context.logger))
        }
        router.delete("/api/user/me") { request, context in
            let session = try await authenticate(request, context)
            var request = request
            let body = try await request.decodeJSON(DeleteMeRequest.self, context: context)
            try await auth.deleteMe(session, password: body.password, client: client(request, context), logger: context.logger)
            return Response(status: .noContent)
        }
    }

    func authenticate(_ request: Request, _ context: AppRequestContext) async throws -> AuthenticatedSession {
        try await authenticator.session(request, context)
    }

    func client(_ request: Request, _ context: AppRequestContext) -> ClientInfo {
        ClientInfo(ip: context.clientIP, userAgent: request.headers[.userAgent])
    }

    static func json(_ session: IssuedSession) -> SessionJSON { SessionJSON(id: session.id, token: session.token, expiresAt: iso(session.expiresAt)) }

    static func iso(_ date: Date) -> String {
        ISO8601DateFormatter.string(from: date, timeZone: .gmt, formatOptions: [.withInternetDateTime, .withFractionalSeconds])
    }
}

extension Optional where Wrapped: Sendable {
    func asyncMap<T>(_ transform: (Wrapped) async throws -> T) async rethrows -> T? {
        guard let value = self else { return nil }
        return try await transform(value)
    }
}
