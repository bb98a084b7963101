import Auth
import Foundation

/// A new session as sign-up verification, sign-in, second factors and Sign in with Apple answer it.
struct SessionJSON: Encodable, Sendable {
    let id: String; let token: String; let expiresAt: String
    init(_ session: IssuedSession) { (id, token, expiresAt) = (session.id, session.token, ISODate.string(session.expiresAt)) }
}

/// A completed sign-in (password and second factor, or Sign in with Apple).
struct SignInResponse: Encodable, Sendable { let user: User; let session: SessionJSON }

/// A sign-in that waits for its second factor (`POST /api/auth/mfa/verify`).
struct MFAChallengeJSON: Encodable, Sendable { var mfaRequired = true; let mfaToken: String; let expiresAt: String }

/// An account as operators see it.
struct AdminUserJSON: Encodable, Sendable {
    let id: String; let email: String?; let name: String; let role: String; let emailVerified: Bool; let createdAt: String; let deleted: Bool
    init(_ s: UserSummary) {
        (id, email, name, role) = (s.user.id, s.user.email.isEmpty ? nil : s.user.email, s.user.name, s.user.role)
        (emailVerified, createdAt, deleted) = (s.user.emailVerified, ISODate.string(s.createdAt), s.deleted)
    }
}
