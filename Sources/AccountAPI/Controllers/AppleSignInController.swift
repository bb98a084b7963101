import Auth
import Foundation
import HTTPTypes
import Hummingbird
import Identity

/// Sign in with Apple (a native identity token), the account's sign-in methods, and Apple's server-to-server
/// notifications. Off (404) unless `SIGN_IN_WITH_APPLE_CLIENT_IDS` is set.
struct AppleSignInController: Sendable {
    let auth: AuthService
    let verifier: AppleIdentityVerifier?
    let authenticator: Authenticator

    struct AppleRequest: Decodable { let identityToken: String; let nonce: String?; let name: String? }
    struct NotificationRequest: Decodable { let payload: String }
    struct UnlinkRequest: Decodable { let currentPassword: String? }
    struct AppleResponse: Encodable, Sendable { let user: User; let session: SessionJSON; let created: Bool }
    struct MethodJSON: Encodable, Sendable {
        let provider: String; let email: String?; let linkedAt: String?
        init(_ m: SignInMethod) { (provider, email, linkedAt) = (m.provider, m.email, m.linkedAt.map(ISODate.string)) }
    }
    struct IdentitiesResponse: Encodable, Sendable { let identities: [MethodJSON] }
    struct NotificationResponse: Encodable, Sendable { let result: String }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.post("/api/auth/apple", use: signIn)
        router.get("/api/auth/identities", use: identities)
        router.delete("/api/auth/identities/:provider", use: unlink)
        router.post("/api/webhooks/apple/signin", use: notification)
    }

    func requireVerifier() throws -> AppleIdentityVerifier {
        guard let verifier else { throw Problem.notFound("Sign in with Apple is not configured (SIGN_IN_WITH_APPLE_CLIENT_IDS).") }
        return verifier
    }

    /// The sign-in body plus `created`; with two-factor codes on, `{mfaRequired, mfaToken, expiresAt}` instead.
    @Sendable func signIn(_ request: Request, context: AppRequestContext) async throws -> Response {
        let verifier = try requireVerifier()
        var request = request
        let body = try await request.decodeJSON(AppleRequest.self, context: context)
        if let nonce = body.nonce, nonce.isEmpty || nonce.utf8.count > 256 { throw Problem.validation("Field 'nonce' must be 1 to 256 bytes.") }
        let identity = try await verifier.verify(body.identityToken, nonce: body.nonce)
        let result = try await auth.signInWithApple(
            AppleSignIn(subject: identity.subject, email: identity.email, emailVerified: identity.emailVerified), name: body.name,
            client: context.client(request), logger: context.logger)
        switch result.outcome {
        case .session(let user, let session):
            return try JSONResponse(
                AppleResponse(user: user, session: SessionJSON(session), created: result.created),
                status: result.created ? .created : .ok
            ).response(from: request, context: context)
        case .mfaRequired(let token, let expiresAt):
            return try JSONResponse(MFAChallengeJSON(mfaToken: token, expiresAt: ISODate.string(expiresAt))).response(
                from: request, context: context)
        }
    }

    @Sendable func identities(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<IdentitiesResponse> {
        let session = try await authenticator.session(request, context)
        let methods = try await auth.signInMethods(userID: session.user.id, logger: context.logger)
        return JSONResponse(IdentitiesResponse(identities: methods.map(MethodJSON.init)))
    }

    /// Unlinks Apple; refused (409) when it is the account's only way in.
    @Sendable func unlink(_ request: Request, context: AppRequestContext) async throws -> Response {
        let session = try await authenticator.session(request, context)
        var request = request
        let body = try await request.decodeJSON(UnlinkRequest.self, context: context, emptyMeans: "{}")
        try await auth.unlinkSignInMethod(
            session, provider: try context.pathParameter("provider"), currentPassword: body.currentPassword ?? "",
            client: context.client(request),
            logger: context.logger)
        return Response(status: .noContent)
    }

    /// Apple posts `{"payload": "<JWT>"}`; a payload that does not verify is 401 and changes nothing.
    @Sendable func notification(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<NotificationResponse> {
        let verifier = try requireVerifier()
        var request = request
        let body = try await request.decodeJSON(NotificationRequest.self, context: context)
        let event = try await verifier.verifyNotification(body.payload)
        return JSONResponse(
            NotificationResponse(
                result: try await auth.appleEvent(
                    type: event.type, subject: event.subject, id: event.id, eventTime: event.eventTime, logger: context.logger)))
    }
}
