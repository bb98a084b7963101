import Auth
import Clock
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// The operator signed in to the console, and the CSRF token of that session.
struct ConsoleOperator: Sendable {
    let session: AuthenticatedSession
    let csrf: String
    /// When the request was authenticated (before its action): the audit lines written since are the action's.
    let startedAt: Date
    /// The audit actor, as for the API's operator sessions.
    var actor: String { "user:" + session.user.id }
}

/// Thrown to answer with a redirect (303, so a POST becomes a GET).
struct ConsoleRedirect: Error {
    let location: String
    static let signIn = ConsoleRedirect(location: "/console/sign-in")
}

/// The console's door: its session cookie, CSRF tokens and the same-origin check, the one form body it reads, and the
/// headers of every console response. One file, so every console route is guarded by the same rules.
struct ConsoleGate: Sendable {
    let auth: AuthService
    let requireAdminMFA: Bool
    let clock: any TimeSource

    static let sessionCookie = "console_session"
    /// The sign-in form's CSRF value before there is a session (double submit: this cookie and the form must agree).
    static let signInCookie = "console_sign_in"
    static let formBytesMax = 64 * 1024

    /// The operator behind the request's console cookie; nil when there is none, or it is not a live console session of
    /// an admin (an API session's token in the cookie is not one).
    func signedIn(_ request: Request, _ context: AppRequestContext) async throws -> ConsoleOperator? {
        guard let token = request.cookies[Self.sessionCookie]?.value, !token.isEmpty else { return nil }
        do {
            let startedAt = clock.now()
            let session = try await auth.consoleSession(token: token, logger: context.logger)
            context.credentials?.record(.console(token: token))
            return ConsoleOperator(session: session, csrf: Self.csrfToken(session: token), startedAt: startedAt)
        } catch AuthError.unauthorized {
            return nil
        }
    }

    /// The signed-in operator, or a redirect to the sign-in page.
    func require(_ request: Request, _ context: AppRequestContext) async throws -> ConsoleOperator {
        guard let signedIn = try await signedIn(request, context) else { throw ConsoleRedirect.signIn }
        return signedIn
    }

    /// A form an operator posted: from this origin, url-encoded, at most 64 KiB, carrying the session's CSRF token.
    func form(_ request: Request, _ context: AppRequestContext, from op: ConsoleOperator) async throws -> ConsoleForm {
        let form = try await Self.readForm(request, context)
        try Self.requireToken(form["csrf"], equals: op.csrf)
        return form
    }

    /// A form that makes lasting access (an API key, a webhook secret, clearing someone's second factor): as
    /// ``form(_:_:from:)``, and the session must have signed in recently or confirm it is the operator in the form, as
    /// `/api/auth/reauthenticate` does (`password`, and in `code` a code or recovery code when two-factor codes are on),
    /// asked only when the sign-in is not recent. Returns the form and the check to run again in the write's transaction.
    func lastingAccessForm(
        _ request: Request, _ context: AppRequestContext, from op: ConsoleOperator
    ) async throws -> (form: ConsoleForm, authorise: AuthService.Authorisation) {
        let form = try await form(request, context, from: op)
        do {
            try await auth.requireRecentAuthentication(op.session, logger: context.logger)
        } catch AuthError.reauthenticationRequired {
            // Only now the confirmation (a password manager may fill the field on every form).
            guard let password = form.secret("password") else {
                throw Problem(
                    .forbidden, code: "reauthentication_required",
                    detail:
                        "You signed in more than 10 minutes ago: enter your password (and two-factor code) in the form to confirm it is you, then send it again."
                )
            }
            let factor = SecondFactor.typed(form.text("code") ?? "")
            _ = try await auth.reauthenticate(op.session, password: password, factor: factor, client: context.client(request), logger: context.logger)
        }
        return (form, auth.recentOperator(op.session))
    }

    /// A posted `multipart/form-data` form (image uploads): the same origin and CSRF checks, its size bounded by `limit`.
    func multipart(_ request: Request, _ context: AppRequestContext, from op: ConsoleOperator, limit: Int) async throws -> [Multipart.Part] {
        try Self.checkOrigin(request)
        var request = request
        let parts = try await Multipart.parts(&request, context: context, limit: limit)
        try Self.requireToken(Multipart.text(parts, "csrf"), equals: op.csrf)
        return parts
    }

    /// The sign-in form: the same checks, against the sign-in cookie's value.
    func signInForm(_ request: Request, _ context: AppRequestContext) async throws -> ConsoleForm {
        let form = try await Self.readForm(request, context)
        try Self.requireToken(form["csrf"], equals: request.cookies[Self.signInCookie]?.value ?? "")
        return form
    }

    static func readForm(_ request: Request, _ context: AppRequestContext) async throws -> ConsoleForm {
        try checkOrigin(request)
        guard request.headers[.contentType]?.lowercased().hasPrefix("application/x-www-form-urlencoded") == true else {
            throw Problem(.unsupportedMediaType, code: "validation_failed", detail: "Console forms are sent as application/x-www-form-urlencoded.")
        }
        let body: ByteBuffer
        do {
            var request = request
            body = try await request.readBody(upTo: formBytesMax, context: context)
        } catch let error where error is NIOTooManyBytesError || (error as? any HTTPResponseError)?.status == .contentTooLarge {
            throw Problem(.contentTooLarge, code: "validation_failed", detail: "A console form is at most \(formBytesMax / 1024) KiB.")
        }
        return try ConsoleForm(bytes: Array(body.readableBytesView))
    }

    /// A state-changing request must come from the console's own pages: a cross-site `Sec-Fetch-Site`, an `Origin` of
    /// another host, or an opaque (`null`) origin is refused before the body is read. Without `Origin` (older browsers),
    /// a `Referer` of another host is refused the same way; with neither, the CSRF token alone decides.
    static func checkOrigin(_ request: Request) throws {
        let refused = Problem(.forbidden, code: "forbidden", detail: "Console forms are accepted only from the console's own pages.")
        if let site = request.headers[.secFetchSite], !["same-origin", "none"].contains(site.lowercased()) { throw refused }
        guard let source = request.headers[.origin] ?? request.headers[.referer] else { return }
        guard isSameAuthority(source, request) else { throw refused }
    }

    /// Whether `url` (an `Origin` or a `Referer`) names the host and port this request was sent to.
    static func isSameAuthority(_ url: String, _ request: Request) -> Bool {
        guard let components = URLComponents(string: url), let host = components.host, !host.isEmpty, let authority = authority(request) else {
            return false
        }
        let port = components.port.map { ":\($0)" } ?? ""
        return (host + port).lowercased() == authority.lowercased() || "[\(host)]\(port)".lowercased() == authority.lowercased()
    }

    static func requireToken(_ given: String?, equals expected: String) throws {
        guard let given, !expected.isEmpty, given.utf8.count == expected.utf8.count,
            zip(given.utf8, expected.utf8).reduce(UInt8(0), { $0 | ($1.0 ^ $1.1) }) == 0
        else {
            throw Problem(.forbidden, code: "forbidden", detail: "The form's CSRF token is missing or wrong: reload the page and send it again.")
        }
    }

    /// The session's CSRF token: an HMAC of a fixed label under the session's own secret, so it needs no storage and
    /// nobody without the (HttpOnly) cookie can compute it.
    static func csrfToken(session token: String) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Data("console-csrf".utf8), using: SymmetricKey(data: Data(token.utf8)))
        return Data(mac).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// A fresh random value for the sign-in form's double submit.
    static func newSignInToken() -> String {
        csrfToken(session: FreshID.uuid() + FreshID.uuid())
    }

    /// `Set-Cookie` for a console cookie: `HttpOnly`, `SameSite=Strict`, `Path=/console`, and `Secure` unless a local
    /// operator reached the console directly on a loopback address without TLS. An empty value with `maxAge` 0 deletes it.
    static func cookie(
        _ name: String, _ value: String, maxAge: Int, path: String = "/console", request: Request, context: AppRequestContext
    ) -> String {
        var cookie = "\(name)=\(value); Path=\(path); Max-Age=\(maxAge); HttpOnly; SameSite=Strict"
        if !isDirectLoopback(request, context) { cookie += "; Secure" }
        return cookie
    }

    /// The host (and port) the request was sent to (Hummingbird maps HTTP/1's `Host` to it).
    static func authority(_ request: Request) -> String? {
        request.head.authority
    }

    /// Headers that proxies add: with any of them the request came through one, and cookies are `Secure`.
    static let proxyHeaders: Set<String> = [
        "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-forwarded-port", "x-forwarded-ssl", "x-forwarded-scheme", "forwarded",
        "x-real-ip", "x-url-scheme", "front-end-https", "via",
    ]

    /// True only when the connection comes from a loopback address, no proxy header is present, and the request names
    /// exactly `localhost`, `127.0.0.1` or `[::1]` (any port). Anything else (a proxy in front, a public name, a
    /// look-alike such as `127.example.com`) gets `Secure` cookies.
    static func isDirectLoopback(_ request: Request, _ context: AppRequestContext) -> Bool {
        guard !request.headers.contains(where: { Self.proxyHeaders.contains($0.name.canonicalName) }),
            context.remoteIP == "::1" || context.remoteIP.hasPrefix("127."),
            let authority = authority(request)?.lowercased()
        else { return false }
        for host in ["localhost", "127.0.0.1", "[::1]"] where authority == host || authority.hasPrefix(host + ":") {
            let port = authority.dropFirst(host.count + 1)
            return authority == host || (!port.isEmpty && port.count <= 5 && port.allSatisfy(\.isASCII) && port.allSatisfy(\.isNumber))
        }
        return false
    }

    /// The headers of every console response: nothing framed, nothing loaded from elsewhere, nothing cached, no address
    /// leaves for another site (`same-origin`, not `no-referrer`: under that, browsers send `Origin: null` with forms).
    static func secure(_ headers: inout HTTPFields) {
        headers[.contentSecurityPolicy] =
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        headers[.xFrameOptions] = "DENY"
        headers[.referrerPolicy] = "same-origin"
        headers[.crossOriginOpenerPolicy] = "same-origin"
        if headers[.cacheControl] == nil { headers[.cacheControl] = "no-store" }
    }
}

/// An `application/x-www-form-urlencoded` body, read strictly: at most 64 fields, each name once, valid percent-encoded
/// UTF-8 (anything else is 400). Hand-written rather than Hummingbird's `URLEncodedFormDecoder`, which keeps the last of
/// repeated names and decodes into types: the console reads flat text fields and refuses ambiguity. Indexing stays within
/// the slice (`endIndex - index >= 3` before reading an escape), so no input traps.
struct ConsoleForm: Sendable {
    static let fieldsMax = 64
    private let fields: [String: String]

    /// Splits on the bytes `&` and `=` (never on characters, so a combining mark cannot hide a separator), then
    /// percent-decodes each name and value and requires valid UTF-8.
    init(bytes: [UInt8]) throws {
        var fields: [String: String] = [:]
        for pair in bytes.split(separator: UInt8(ascii: "&")) {
            guard fields.count < Self.fieldsMax else { throw Problem.validation("A console form has at most \(Self.fieldsMax) fields.") }
            let name = pair.prefix(while: { $0 != UInt8(ascii: "=") })
            let value = pair.dropFirst(name.count + 1)
            guard let name = Self.decode(name), let value = Self.decode(value) else {
                throw Problem.validation("The form is not valid application/x-www-form-urlencoded UTF-8 text.")
            }
            guard fields[name] == nil else { throw Problem.validation("The form names '\(name.prefix(64))' more than once.") }
            fields[name] = value
        }
        self.fields = fields
    }

    init(body: String) throws { try self.init(bytes: Array(body.utf8)) }

    /// `+` is a space and `%XX` a byte; the result must be valid UTF-8 (nil otherwise, or on a broken escape).
    static func decode(_ raw: ArraySlice<UInt8>) -> String? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(raw.count)
        var index = raw.startIndex
        while index < raw.endIndex {
            let byte = raw[index]
            if byte == UInt8(ascii: "%") {
                guard raw.endIndex - index >= 3, let high = hexValue(raw[index + 1]), let low = hexValue(raw[index + 2]) else { return nil }
                bytes.append(high << 4 | low)
                index += 3
            } else {
                bytes.append(byte == UInt8(ascii: "+") ? UInt8(ascii: " ") : byte)
                index += 1
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    subscript(_ name: String) -> String? { fields[name] }

    /// A field's trimmed text; nil when absent or empty.
    func text(_ name: String) -> String? {
        guard let value = fields[name]?.trimmingCharacters(in: .whitespacesAndNewlines), !value.isEmpty else { return nil }
        return value
    }

    /// A field exactly as sent (a password: spaces are part of it), nil when absent or empty.
    func secret(_ name: String) -> String? {
        guard let value = fields[name], !value.isEmpty else { return nil }
        return value
    }

    func required(_ name: String, label: String) throws -> String {
        guard let value = text(name) else { throw Problem.validation("\(label) is required.") }
        return value
    }

    /// A whole number in `range`.
    func number(_ name: String, label: String, in range: ClosedRange<Int64>) throws -> Int64 {
        guard let value = Int64(try required(name, label: label)), range.contains(value) else {
            throw Problem.validation("\(label) must be a whole number from \(range.lowerBound) to \(range.upperBound).")
        }
        return value
    }
}

extension HTTPField.Name {
    static let secFetchSite = Self("Sec-Fetch-Site")!
    static let xFrameOptions = Self("X-Frame-Options")!
    static let referrerPolicy = Self("Referrer-Policy")!
    static let crossOriginOpenerPolicy = Self("Cross-Origin-Opener-Policy")!
}
