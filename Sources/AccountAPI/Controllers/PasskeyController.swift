import Auth
import Foundation
import HTTPTypes
import Hummingbird
import WebAuthn

/// Passkeys (WebAuthn): the registration ceremony behind a session, the sign-in ceremony without one, and the
/// account's list. Bodies follow the WebAuthn JSON serialization (base64url bytes), so a browser's
/// `PublicKeyCredential.parseCreationOptionsFromJSON` / `toJSON()` and an iOS app's
/// `ASAuthorizationPlatformPublicKeyCredentialProvider` values map onto them directly. Off (404) unless `WEBAUTHN_RP_ID`.
struct PasskeyController: Sendable {
    let passkeys: PasskeyService?
    let authenticator: Authenticator

    static let bodyBytesMax = 64 * 1024

    struct PresenceRequest: Decodable {
        let currentPassword: String?; let code: String?; let recoveryCode: String?
        /// With two-factor codes on, adding a passkey needs one of them too.
        func factor() throws -> SecondFactor? { try SecondFactor.from(code: code, recoveryCode: recoveryCode, required: false) }
    }
    struct RenameRequest: Decodable { let name: String }
    struct RegistrationRequest: Decodable {
        struct Response: Decodable { let clientDataJSON: String; let attestationObject: String }
        let type: String; let response: Response; let name: String?
    }
    struct AssertionRequest: Decodable {
        struct Response: Decodable { let clientDataJSON: String; let authenticatorData: String; let signature: String; let userHandle: String? }
        let id: String; let type: String; let response: Response
    }

    struct Party: Encodable, Sendable { let id: String; let name: String }
    struct UserEntity: Encodable, Sendable { let id: String; let name: String; let displayName: String }
    struct Parameter: Encodable, Sendable { var type = "public-key"; let alg: Int64 }
    struct Descriptor: Encodable, Sendable { var type = "public-key"; let id: String }
    struct Selection: Encodable, Sendable { var residentKey = "required"; var requireResidentKey = true; var userVerification = "required" }
    struct CreationOptionsJSON: Encodable, Sendable {
        let rp: Party; let user: UserEntity; let challenge: String; let pubKeyCredParams: [Parameter]; let timeout: Int
        var attestation = "none"; let authenticatorSelection: Selection; let excludeCredentials: [Descriptor]; let expiresAt: String
    }
    struct RequestOptionsJSON: Encodable, Sendable {
        let challenge: String; let rpId: String; let timeout: Int; var userVerification = "required"; let allowCredentials: [Descriptor]
        let expiresAt: String
    }
    struct PasskeyJSON: Encodable, Sendable {
        let id: String; let name: String; let createdAt: String; let lastUsedAt: String?; let backupEligible: Bool; let backedUp: Bool
        init(_ p: Passkey) {
            (id, name, createdAt, lastUsedAt) = (p.id, p.name, ISODate.string(p.createdAt), p.lastUsedAt.map(ISODate.string))
            (backupEligible, backedUp) = (p.backupEligible, p.backedUp)
        }
    }
    struct PasskeyResponse: Encodable, Sendable { let passkey: PasskeyJSON }
    struct PasskeysResponse: Encodable, Sendable { let passkeys: [PasskeyJSON] }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.post("/api/auth/passkeys/register/options", use: registrationOptions)
        router.post("/api/auth/passkeys/register/verify", use: register)
        router.post("/api/auth/passkeys/sign-in/options", use: signInOptions)
        router.post("/api/auth/passkeys/sign-in/verify", use: signIn)
        router.get("/api/auth/passkeys", use: list)
        router.patch("/api/auth/passkeys/:id", use: rename)
        router.delete("/api/auth/passkeys/:id", use: delete)
    }

    func service() throws -> PasskeyService {
        guard let passkeys else { throw Problem.notFound("Passkeys are not configured (WEBAUTHN_RP_ID).") }
        return passkeys
    }

    static var timeoutMilliseconds: Int { 300_000 }

    @Sendable func registrationOptions(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<CreationOptionsJSON> {
        let service = try service()
        let session = try await authenticator.session(request, context)
        var request = request
        let body = try await request.decodeJSON(PresenceRequest.self, context: context, emptyMeans: "{}", limitBytes: Self.bodyBytesMax)
        let options = try await service.registrationOptions(
            session, currentPassword: body.currentPassword ?? "", factor: try body.factor(), client: context.client(request), logger: context.logger)
        let party = service.relyingParty
        return JSONResponse(
            CreationOptionsJSON(
                rp: Party(id: party.id, name: party.name),
                user: UserEntity(id: Base64URL.encode(options.userHandle), name: options.userName, displayName: options.displayName),
                challenge: Base64URL.encode(options.challenge),
                pubKeyCredParams: [Parameter(alg: COSEKey.es256Algorithm), Parameter(alg: COSEKey.rs256Algorithm)],
                timeout: Self.timeoutMilliseconds, authenticatorSelection: Selection(),
                excludeCredentials: options.exclude.map { Descriptor(id: $0) },
                expiresAt: ISODate.string(options.expiresAt)))
    }

    @Sendable func register(_ request: Request, context: AppRequestContext) async throws -> Response {
        let service = try service()
        let session = try await authenticator.session(request, context)
        var request = request
        let body = try await request.decodeJSON(RegistrationRequest.self, context: context, limitBytes: Self.bodyBytesMax)
        try Self.requirePublicKey(body.type)
        let passkey = try await service.register(
            session, clientData: try Self.bytes(body.response.clientDataJSON, "response.clientDataJSON", RelyingParty.clientDataBytesMax),
            attestationObject: try Self.bytes(body.response.attestationObject, "response.attestationObject", RelyingParty.attestationObjectBytesMax),
            name: body.name, client: context.client(request), logger: context.logger)
        return try JSONResponse(PasskeyResponse(passkey: PasskeyJSON(passkey)), status: .created).response(from: request, context: context)
    }

    @Sendable func signInOptions(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<RequestOptionsJSON> {
        let service = try service()
        let options = service.signInOptions()
        return JSONResponse(
            RequestOptionsJSON(
                challenge: Base64URL.encode(options.challenge), rpId: service.relyingParty.id, timeout: Self.timeoutMilliseconds,
                allowCredentials: [],
                expiresAt: ISODate.string(options.expiresAt)))
    }

    /// The same body as a password sign-in's (`user`, `session`); a passkey is both factors, so never `mfaRequired`.
    @Sendable func signIn(_ request: Request, context: AppRequestContext) async throws -> Response {
        let service = try service()
        var request = request
        let body = try await request.decodeJSON(AssertionRequest.self, context: context, limitBytes: Self.bodyBytesMax)
        try Self.requirePublicKey(body.type)
        guard let id = Base64URL.decode(body.id, bytesMax: AuthenticatorData.credentialIDBytesMax), !id.isEmpty else {
            throw Problem.validation("Field 'id' must be the credential id in base64url (1 to 1,023 bytes).")
        }
        let answer = PasskeyAssertion(
            credentialID: Base64URL.encode(id),
            clientData: try Self.bytes(body.response.clientDataJSON, "response.clientDataJSON", RelyingParty.clientDataBytesMax),
            authenticatorData: try Self.bytes(body.response.authenticatorData, "response.authenticatorData", RelyingParty.authenticatorDataBytesMax),
            signature: try Self.bytes(body.response.signature, "response.signature", RelyingParty.signatureBytesMax),
            userHandle: try body.response.userHandle.flatMap { $0.isEmpty ? nil : try Self.bytes($0, "response.userHandle", 64) })
        switch try await service.signIn(answer, client: context.client(request), logger: context.logger) {
        case .session(let user, let session):
            return try JSONResponse(SignInResponse(user: user, session: SessionJSON(session))).response(from: request, context: context)
        case .mfaRequired:
            throw Problem(.internalServerError, code: "internal_error", detail: "A passkey sign-in asked for a second factor.")
        }
    }

    @Sendable func list(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<PasskeysResponse> {
        let service = try service()
        let session = try await authenticator.session(request, context)
        return JSONResponse(PasskeysResponse(passkeys: try await service.list(session, logger: context.logger).map(PasskeyJSON.init)))
    }

    @Sendable func rename(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<PasskeyResponse> {
        let service = try service()
        let session = try await authenticator.session(request, context)
        var request = request
        let body = try await request.decodeJSON(RenameRequest.self, context: context, limitBytes: Self.bodyBytesMax)
        let passkey = try await service.rename(session, id: try context.pathParameter("id"), name: body.name, logger: context.logger)
        return JSONResponse(PasskeyResponse(passkey: PasskeyJSON(passkey)))
    }

    /// Never the account's last way in (409); needs `currentPassword` (or a sign-in in the last 10 minutes without one).
    @Sendable func delete(_ request: Request, context: AppRequestContext) async throws -> Response {
        let service = try service()
        let session = try await authenticator.session(request, context)
        var request = request
        let body = try await request.decodeJSON(PresenceRequest.self, context: context, emptyMeans: "{}", limitBytes: Self.bodyBytesMax)
        try await service.delete(
            session, id: try context.pathParameter("id"), currentPassword: body.currentPassword ?? "", client: context.client(request),
            logger: context.logger)
        return Response(status: .noContent)
    }

    static func requirePublicKey(_ type: String) throws {
        guard type == "public-key" else { throw Problem.validation("Field 'type' must be 'public-key'.") }
    }

    static func bytes(_ text: String, _ field: String, _ bytesMax: Int) throws -> [UInt8] {
        guard let bytes = Base64URL.decode(text, bytesMax: bytesMax) else {
            throw Problem.validation("Field '\(field)' must be base64url of at most \(bytesMax) bytes.")
        }
        return bytes
    }
}
