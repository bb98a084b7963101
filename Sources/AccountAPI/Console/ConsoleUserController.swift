import Auth
import Billing
import Entitlements
import Foundation
import Hummingbird
import Ledger

/// Users in the console: search, the user page (what the app sees, and what support needs), and the actions on it —
/// through the same service functions as `/api/admin/users/…`, so the rules, audit rows and events are the same.
struct ConsoleUserController: Sendable {
    let gate: ConsoleGate
    let pages: ConsolePages
    let auth: AuthService
    let profiles: ProfileService
    let ledger: LedgerService
    let entitlements: EntitlementService
    let subscriptions: SubscriptionService
    let stickers: StickerService
    let catalog: PlanCatalog
    let billing: BillingService
    let content: StickerContentService

    static let pageSize = 50
    static let historyPageSize = 25

    func addRoutes(to group: RouterGroup<AppRequestContext>) {
        group.get("users", use: users)
        group.get("users/:userId", use: user)
        group.post("users/:userId/grant", use: grant)
        group.post("users/:userId/debit", use: debit)
        group.post("users/:userId/reverse", use: reverse)
        group.post("users/:userId/comp", use: comp)
        group.post("users/:userId/end-subscription", use: endSubscription)
        group.post("users/:userId/sessions/revoke", use: revokeSessions)
        group.post("users/:userId/profiles/:id/reset-pin", use: resetPIN)
        group.post("users/:userId/profiles/:id/rename", use: renameProfile)
        group.post("users/:userId/profiles/:id/delete", use: deleteProfile)
        group.post("users/:userId/clear-mfa", use: clearMFA)
        group.post("users/:userId/erase", use: erase)
    }

    struct UsersView { let chrome: Chrome; let query: String; let users: [UserLine]; let next: String? }
    struct UserLine {
        let id: String; let email: String?; let name: String; let role: String; let verified: Bool; let createdAt: String
        init(_ s: UserSummary) {
            (id, email, name, role) = (s.user.id, s.user.email.isEmpty ? nil : s.user.email, s.user.name, s.user.role)
            (verified, createdAt) = (s.user.emailVerified, ISODate.string(s.createdAt))
        }
    }

    /// By email (or its beginning, paged by keyset) or by id; without a query, the newest users.
    @Sendable func users(_ request: Request, context: AppRequestContext) async throws -> Response {
        let op = try await gate.require(request, context)
        let parameters = request.uri.queryParameters
        let query = parameters["query"].map { String($0.prefix(320)).trimmingCharacters(in: .whitespaces) } ?? ""
        var found: [UserSummary]
        var next: String? = nil
        if query.isEmpty {
            found = try await auth.findUsers(email: nil, limit: Self.pageSize, logger: context.logger)
        } else if UUID(uuidString: query) != nil {
            found = [try? await auth.findUser(id: query.lowercased(), logger: context.logger)].compactMap { $0 }
        } else {
            let cursor = parameters["cursor"].map { String($0.prefix(320)) }
            let page = try await auth.searchUsers(query: query, cursor: cursor, limit: Self.pageSize, logger: context.logger)
            found = page.users
            next = page.nextCursor.map { ConsoleLinks.query("/console/users", [("query", query), ("cursor", $0)]) }
        }
        return pages.page("users", UsersView(chrome: Chrome("Users", op), query: query, users: found.map(UserLine.init), next: next))
    }

    /// The operator and the `userId` of a console route, when such a user exists (else 404).
    func target(_ request: Request, _ context: AppRequestContext) async throws -> (ConsoleOperator, String) {
        let op = try await gate.require(request, context)
        let id = try context.pathParameter("userId")
        _ = try await auth.findUser(id: id, logger: context.logger)
        return (op, id)
    }

    /// A posted action on a user: the operator, the user's id, the checked form. An erased account takes no action.
    func action(_ request: Request, _ context: AppRequestContext) async throws -> (ConsoleOperator, String, ConsoleForm) {
        let (op, id, form, _) = try await action(request, context, lasting: false)
        return (op, id, form)
    }

    /// The same, for an action that changes access for longer than the session lasts (``ConsoleGate/lastingAccessForm``):
    /// also the check to run again in the write's transaction.
    func action(
        _ request: Request, _ context: AppRequestContext, lasting: Bool
    ) async throws -> (ConsoleOperator, String, ConsoleForm, AuthService.Authorisation) {
        let op = try await gate.require(request, context)
        let id = try context.pathParameter("userId")
        guard try await !auth.findUser(id: id, logger: context.logger).deleted else { throw Problem.notFound("This account was erased.") }
        guard lasting else { return (op, id, try await gate.form(request, context, from: op), { _ in }) }
        let (form, authorise) = try await gate.lastingAccessForm(request, context, from: op)
        return (op, id, form, authorise)
    }

    func done(_ title: String, _ lines: [String], _ op: ConsoleOperator, userID: String, context: AppRequestContext) async throws -> Response {
        try await pages.result(
            title, lines, op: op, subject: userID, auth: auth, back: "/console/users/" + ConsoleLinks.segment(userID),
            backLabel: "Back to the user", logger: context.logger)
    }
}
