import Auth
import Foundation
import Hummingbird
import Logging
import NIOCore

/// Per-request state: the core context plus the caller's address (for rate limits and audit).
struct AppRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    /// The socket peer's IP address as text, or "unknown" (router tests have no socket).
    let remoteIP: String
    /// The client's IP address: the socket peer, or through trusted proxies the `X-Forwarded-For` hop
    /// (``ClientAddressMiddleware``). Rate limits and the audit log use this one.
    var clientIP: String
    /// What bodies still being read may hold (``BodyBudgetMiddleware``; nil: no budget, as in router tests without it).
    var bodies: BodyBudget?
    /// The body, when it arrived before any handler ran (``BodyBudgetMiddleware``): reading it again returns this.
    var preReadBody: ByteBuffer?
    /// For a body its handler reads (chunked, larger, uploads): the credentials the request was authenticated with, checked
    /// again once the body is in (``BodyBudgetMiddleware``, ``Authenticator/recheck(_:_:)``).
    var credentials: RequestCredentials?

    init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.remoteIP = source.channel.remoteAddress?.ipAddress ?? "unknown"
        self.clientIP = remoteIP
    }

    /// Bodies are limited to 1 MiB; larger ones get a 413 problem.
    var maxUploadSize: Int { 1 << 20 }
}

extension AppRequestContext {
    /// Who is calling and from where, for limits, devices and the audit log.
    func client(_ request: Request) -> ClientInfo {
        ClientInfo(ip: clientIP, userAgent: request.headers[.userAgent])
    }
}

extension AppRequestContext {
    /// A path parameter, percent-decoded: clients that escape reserved characters (swift-openapi-runtime does) send
    /// `custom%3A<uuid>` for the sticker `custom:<uuid>`. A malformed escape, bytes that are not UTF-8, or a control
    /// character names nothing that can exist: 404 (and never reaches a query). Controllers read path parameters only
    /// through here (`ContractTests`).
    func pathParameter(_ name: String) throws -> String {
        let raw = try parameters.require(name)
        guard let decoded = raw.removingPercentEncoding, !decoded.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
        else { throw Problem.notFound("Nothing has this \(name): it is not valid percent-encoded UTF-8 text.") }
        return decoded
    }
}
