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

/// `GET /api/auth/sessions` and `GET /api/admin/users/{userId}/sessions`.
struct SessionsResponse: Encodable, Sendable { let sessions: [SessionSummaryJSON] }
struct SessionSummaryJSON: Encodable, Sendable {
    let id: String; let createdAt: String; let lastUsedAt: String; let expiresAt: String; let userAgent: String?; let ip: String?;
    let current: Bool
    init(_ s: SessionSummary) {
        (id, createdAt, lastUsedAt, expiresAt) = (s.id, ISODate.string(s.createdAt), ISODate.string(s.lastUsedAt), ISODate.string(s.expiresAt))
        (userAgent, ip, current) = (s.userAgent, s.ip, s.current)
    }
}
