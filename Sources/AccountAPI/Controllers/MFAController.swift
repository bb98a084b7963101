import Auth
import Foundation
import Hummingbird

/// Two-factor codes (TOTP, RFC 6238): enrolment, recovery codes, turning them off, and completing a sign-in.
struct MFAController: Sendable {
    let auth: AuthService
    let authenticator: Authenticator
    let issuer: String

    struct Setup: Encodable, Sendable { let secret: String; let otpauthUrl: String }
    struct Enabled: Encodable, Sendable { let recoveryCodes: [String] }
    struct CodeRequest: Decodable { let code: String }
    struct PasswordRequest: Decodable { let currentPassword: String? }
    struct FactorRequest: Decodable {
        let code: String?; let recoveryCode: String?; let currentPassword: String?; let mfaToken: String?
        func factor() throws -> SecondFactor {
            guard let factor = try SecondFactor.from(code: code, recoveryCode: recoveryCode, required: true) else {
                throw Problem.validation("Send exactly one of 'code' (from the authenticator app) or 'recoveryCode'.")
            }
            return factor
        }
    }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.post("/api/auth/mfa/totp/setup", use: setup)
        router.post("/api/auth/mfa/totp/enable", use: enable)
        router.delete("/api/auth/mfa/totp", use: disable)
        router.post("/api/auth/mfa/verify", use: verify)
    }

    @Sendable func setup(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<Setup> {
        let session = try await authenticator.session(request, context)
        var request = request
        let body = try await request.decodeJSON(PasswordRequest.self, context: context, emptyMeans: "{}")
        let enrollment = try await auth.setupTOTP(
            session, currentPassword: body.currentPassword ?? "", issuer: issuer, client: context.client(request), logger: context.logger)
        return JSONResponse(Setup(secret: enrollment.secret, otpauthUrl: enrollment.otpauthURL))
    }

    @Sendable func enable(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<Enabled> {
        let session = try await authenticator.session(request, context)
        var request = request
        let body = try await request.decodeJSON(CodeRequest.self, context: context)
        return JSONResponse(
            Enabled(recoveryCodes: try await auth.enableTOTP(session, code: body.code, client: context.client(request), logger: context.logger)))
    }

    @Sendable func disable(_ request: Request, context: AppRequestContext) async throws -> Response {
        let session = try await authenticator.session(request, context)
        var request = request
        let body = try await request.decodeJSON(FactorRequest.self, context: context)
        guard let password = body.currentPassword else { throw Problem.validation("Field 'currentPassword' is required.") }
        try await auth.disableTOTP(
            session, factor: try body.factor(), currentPassword: password, client: context.client(request), logger: context.logger)
        return Response(status: .noContent)
    }

    /// Completes a sign-in that answered `mfaRequired`: the normal sign-in body.
    @Sendable func verify(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<SignInResponse> {
        var request = request
        let body = try await request.decodeJSON(FactorRequest.self, context: context)
        guard let token = body.mfaToken else { throw Problem.validation("Field 'mfaToken' is required.") }
        let (user, session) = try await auth.verifySecondFactor(
            token: token, factor: try body.factor(), client: context.client(request), logger: context.logger)
        return JSONResponse(SignInResponse(user: user, session: SessionJSON(session)))
    }
}
