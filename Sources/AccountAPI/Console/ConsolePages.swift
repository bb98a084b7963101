import Auth
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Mustache
import NIOCore

/// What every page's layout shows: the title, who is signed in (and the sign-out form's token), an error.
struct Chrome: Sendable {
    let title: String
    var signedIn = false
    var operatorEmail: String? = nil
    var csrf: String? = nil
    var error: String? = nil

    init(_ title: String, _ op: ConsoleOperator? = nil, error: String? = nil) {
        (self.title, self.error) = (title, error)
        if let op { (signedIn, operatorEmail, csrf) = (true, op.session.user.email, op.csrf) }
    }
}

/// The console's pages: templates from `console/` (compiled in), rendered with swift-mustache (which escapes every
/// `{{value}}` for HTML, quotes included), with the console's security headers.
struct ConsolePages: Sendable {
    let library: MustacheLibrary

    /// Templates that did not parse (a bug in `console/`; `ConsoleTests` holds this empty). Their pages say so.
    let broken: [String]

    init() {
        var library = MustacheLibrary()
        var broken: [String] = []
        for (file, text) in EmbeddedConsole.files where file.hasSuffix(".mustache") {
            let name = String(file.dropLast(".mustache".count))
            do {
                try library.register(text, named: name)
            } catch {
                broken.append(name)
                try? library.register("Template \(name) does not parse: \(String(describing: error).prefix(200))", named: name)
            }
        }
        (self.library, self.broken) = (library, broken.sorted())
    }

    func page(_ template: String, _ view: Any, status: HTTPResponse.Status = .ok) -> Response {
        let html = library.render(view, withTemplate: template) ?? ""
        var headers: HTTPFields = [.contentType: "text/html; charset=utf-8"]
        ConsoleGate.secure(&headers)
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    struct ErrorView { let chrome: Chrome; let detail: String; let back: String }

    /// A problem as a page (the API's problem, so the wording and status are the same as over JSON).
    func error(_ problem: Problem, _ op: ConsoleOperator?, back: String) -> Response {
        let title = problem.status.code >= 500 ? "Something went wrong" : "That did not work"
        // A detail may quote input: control and format characters (bidi overrides, separators) never reach the page.
        let hidden: Set<Unicode.GeneralCategory> = [.control, .format, .lineSeparator, .paragraphSeparator]
        let detail = String(problem.detail.unicodeScalars.map { hidden.contains($0.properties.generalCategory) ? "?" : Character($0) })
        var response = page("error", ErrorView(chrome: Chrome(title, op), detail: detail, back: back), status: problem.status)
        for field in problem.headers { response.headers.append(field) }
        return response
    }

    struct ResultView {
        let chrome: Chrome
        let lines: [String]
        var secret: String? = nil
        let audit: [AuditLine]
        let back: String
        let backLabel: String
    }

    /// One row of a balances table.
    struct BucketLine { let bucket: String; let amount: Int64 }

    struct AuditLine: Sendable {
        let at: String; let actor: String; let action: String; let subject: String; let ip: String; let detail: String
        init(_ e: AuditEntry) {
            (at, actor, action, subject, ip, detail) = (ISODate.string(e.at), e.actor, e.action, e.subject ?? "", e.ip ?? "", e.detail ?? "")
        }
    }

    /// An action's result: what happened, and the audit lines it wrote: the operator's since the request was
    /// authenticated, about `subject` (the user the page is about) when there is one; none when nothing changed, as for
    /// a form sent again. Audit rows carry no request id, so the same operator's parallel actions on the same subject
    /// show each other's lines too.
    func result(
        _ title: String, _ lines: [String], secret: String? = nil, op: ConsoleOperator, subject: String? = nil, auth: AuthService, back: String,
        backLabel: String, logger: Logger
    ) async throws -> Response {
        var query = AuditQuery()
        (query.actor, query.userID, query.since, query.limit) = (op.actor, subject, op.startedAt, 5)
        let audit = try await auth.auditTrail(query, logger: logger).entries.map(AuditLine.init)
        return page(
            "result", ResultView(chrome: Chrome(title, op), lines: lines, secret: secret, audit: audit, back: back, backLabel: backLabel))
    }

    /// `console/console.css` and `console/console.js`.
    func asset(_ name: String) -> Response? {
        guard let text = EmbeddedConsole.files[name], !name.hasSuffix(".mustache") else { return nil }
        let type = name.hasSuffix(".css") ? "text/css; charset=utf-8" : "text/javascript; charset=utf-8"
        var headers: HTTPFields = [.contentType: type, .cacheControl: "private, max-age=300"]
        ConsoleGate.secure(&headers)
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
    }
}

/// Wraps every console route: a redirect answers 303, a 401 (a session that ended mid-action) goes to the sign-in page,
/// any other error is the API's problem rendered as a page; every answer carries the console's security headers.
struct ConsoleMiddleware: RouterMiddleware {
    typealias Context = AppRequestContext
    let pages: ConsolePages
    let problems: ProblemMiddleware<AppRequestContext>

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response: Response
        do {
            response = try await next(request, context)
        } catch let redirect as ConsoleRedirect {
            response = Self.redirect(redirect.location)
        } catch {
            let problem = problems.translate(error, request: request, logger: context.logger)
            if problem.status == .unauthorized {
                response = Self.redirect(ConsoleRedirect.signIn.location)
            } else {
                let back = Self.back(request)
                response = pages.error(problem, nil, back: back)
            }
        }
        ConsoleGate.secure(&response.headers)
        return response
    }

    /// Where an error page's "Back" goes: the console page the request came from (`Referer`, sent within the origin),
    /// else the users page. Only a `/console/` path of this origin is ever used.
    static func back(_ request: Request) -> String {
        guard let referer = request.headers[.referer], let url = URLComponents(string: referer), url.path.hasPrefix("/console/"),
            url.host == nil || ConsoleGate.isSameAuthority(referer, request)
        else { return "/console/users" }
        return url.path + (url.percentEncodedQuery.map { "?" + $0 } ?? "")
    }

    static func redirect(_ location: String) -> Response {
        Response(status: .seeOther, headers: [.location: location])
    }
}
