import Auth
import Entitlements
import Foundation
import HTTPTypes
import Hummingbird
import Ledger

/// The operator console's door and its own pages: sign-in and sign-out, the books, the catalog, API keys and the audit
/// trail (users and webhooks have their own files). `CONSOLE_ENABLED=true` mounts it.
struct ConsoleController: Sendable {
    let gate: ConsoleGate
    let pages: ConsolePages
    let auth: AuthService
    let apiKeys: APIKeyService
    let ledger: LedgerService

    func addRoutes(to group: RouterGroup<AppRequestContext>) {
        group.get("", use: home)
        group.get("assets/:name", use: asset)
        group.get("sign-in", use: signInPage)
        group.post("sign-in", use: signIn)
        group.post("sign-out", use: signOut)
        group.get("books", use: books)
        group.post("books/verify", use: verify)
        group.get("keys", use: keys)
        group.post("keys", use: createKey)
        group.post("keys/:id/revoke", use: revokeKey)
        group.get("audit", use: audit)
        // Anything else under /console is a console page too (its 404 carries the console's headers).
        group.get("**", use: notFound)
        group.post("**", use: notFound)
        group.put("**", use: notFound)
        group.patch("**", use: notFound)
        group.delete("**", use: notFound)
    }

    @Sendable func notFound(_ request: Request, context: AppRequestContext) async throws -> Response {
        throw Problem.notFound("The console has no page here.")
    }

    @Sendable func home(_ request: Request, context: AppRequestContext) async throws -> Response {
        ConsoleMiddleware.redirect(try await gate.signedIn(request, context) == nil ? "/console/sign-in" : "/console/users")
    }

    @Sendable func asset(_ request: Request, context: AppRequestContext) async throws -> Response {
        guard let response = pages.asset(try context.pathParameter("name")) else { throw Problem.notFound("No such console asset.") }
        return response
    }

    struct SignInView { let chrome: Chrome; let csrf: String; let email: String }

    /// The form, with a fresh double-submit value in its own cookie (replaced on every visit).
    @Sendable func signInPage(_ request: Request, context: AppRequestContext) async throws -> Response {
        if try await gate.signedIn(request, context) != nil { return ConsoleMiddleware.redirect("/console/users") }
        return signInForm(request, context, email: "", error: nil, status: .ok)
    }

    func signInForm(_ request: Request, _ context: AppRequestContext, email: String, error: String?, status: HTTPResponse.Status) -> Response {
        let token = ConsoleGate.newSignInToken()
        var response = pages.page(
            "sign-in", SignInView(chrome: Chrome("Operator sign-in", error: error), csrf: token, email: email), status: status)
        response.headers.append(
            HTTPField(
                name: .setCookie,
                value: ConsoleGate.cookie(ConsoleGate.signInCookie, token, maxAge: 3600, path: "/console/sign-in", request: request, context: context)
            ))
        return response
    }

    /// Password and (when on) the TOTP code, on the API's attempt budgets. A refusal shows the form again with the
    /// API's wording; success sets a brand-new session cookie (whatever cookie came in is never adopted).
    @Sendable func signIn(_ request: Request, context: AppRequestContext) async throws -> Response {
        let form = try await gate.signInForm(request, context)
        let input = ConsoleSignIn(email: form["email"] ?? "", password: form["password"] ?? "", code: form.text("code"))
        do {
            let (_, session) = try await auth.consoleSignIn(
                input, requireSecondFactor: gate.requireAdminMFA, client: context.client(request), logger: context.logger)
            var response = ConsoleMiddleware.redirect("/console/users")
            let cookie = ConsoleGate.cookie(
                ConsoleGate.sessionCookie, session.token, maxAge: Int(AuthService.consoleAbsoluteSeconds), request: request, context: context)
            response.headers.append(HTTPField(name: .setCookie, value: cookie))
            response.headers.append(
                HTTPField(
                    name: .setCookie,
                    value: ConsoleGate.cookie(ConsoleGate.signInCookie, "", maxAge: 0, path: "/console/sign-in", request: request, context: context)))
            return response
        } catch let error as AuthError {
            let problem = error.problem
            var response = signInForm(
                request, context, email: String((form["email"] ?? "").prefix(320)), error: problem.detail, status: problem.status)
            for field in problem.headers { response.headers.append(field) }
            return response
        }
    }

    @Sendable func signOut(_ request: Request, context: AppRequestContext) async throws -> Response {
        let op = try await gate.require(request, context)
        _ = try await gate.form(request, context, from: op)
        try await auth.consoleSignOut(op.session, ip: context.clientIP, logger: context.logger)
        var response = ConsoleMiddleware.redirect("/console/sign-in")
        response.headers.append(
            HTTPField(name: .setCookie, value: ConsoleGate.cookie(ConsoleGate.sessionCookie, "", maxAge: 0, request: request, context: context)))
        return response
    }

    struct BooksView {
        let chrome: Chrome; let csrf: String; let report: ReportView?; let totals: [ConsolePages.BucketLine]; let pendingHolds: Int64
        let periods: [PeriodLine]; let monthRuns: Int64; let monthGranted: Int64; let monthExpired: Int64
    }
    struct PeriodLine {
        let userId: String; let periodKey: String; let planId: String; let granted: Int64; let expired: Int64; let at: String
        init(_ r: LedgerService.PeriodRun) {
            (userId, periodKey, planId, granted, expired, at) = (r.userId, r.periodKey, r.planId, r.granted, r.expired, ISODate.string(r.createdAt))
        }
    }
    struct ReportView { let ok: Bool; let accountsChecked: Int; let transfersChecked: Int; let differences: [String]; let milliseconds: Int }

    @Sendable func books(_ request: Request, context: AppRequestContext) async throws -> Response {
        try await booksPage(try await gate.require(request, context), report: nil, context: context)
    }

    /// Runs `ledger verify` and shows its figures on the books page.
    @Sendable func verify(_ request: Request, context: AppRequestContext) async throws -> Response {
        let op = try await gate.require(request, context)
        _ = try await gate.form(request, context, from: op)
        let started = ContinuousClock.now
        let report = try await ledger.verify(logger: context.logger)
        let elapsed = ContinuousClock.now - started
        let view = ReportView(
            ok: report.ok, accountsChecked: report.accountsChecked, transfersChecked: report.transfersChecked,
            differences: Array(report.differences.prefix(100)),
            milliseconds: Int(elapsed / .milliseconds(1)))
        let byBucket = try await ledger.userBucketTotals(logger: context.logger).map {
            ConsolePages.BucketLine(bucket: "users: " + $0.bucket, amount: $0.balance)
        }
        return try await booksPage(op, report: view, userTotals: byBucket, context: context)
    }

    func booksPage(
        _ op: ConsoleOperator, report: ReportView?, userTotals: [ConsolePages.BucketLine] = [], context: AppRequestContext
    ) async throws -> Response {
        let holds = try await ledger.pendingHoldCount(logger: context.logger)
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC") ?? .current
        let month = calendar.dateInterval(of: .month, for: op.startedAt)?.start ?? op.startedAt
        let periods = try await ledger.periodRuns(limit: 20, since: month, logger: context.logger)
        return pages.page(
            "books",
            BooksView(
                chrome: Chrome("Books", op), csrf: op.csrf, report: report, totals: userTotals, pendingHolds: holds,
                periods: periods.runs.map(PeriodLine.init), monthRuns: periods.count, monthGranted: periods.granted,
                monthExpired: periods.expired))
    }
}
