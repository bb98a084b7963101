import Auth
import Foundation
import Hummingbird

/// API keys and the audit trail in the console, through the same service functions as `/api/admin/api-keys` and
/// `/api/admin/audit`.
extension ConsoleController {
    struct KeysView { let chrome: Chrome; let csrf: String; let keys: [KeyLine] }
    struct KeyLine {
        let id: String; let name: String; let scopes: String; let createdAt: String; let lastUsedAt: String?; let active: Bool
        init(_ k: APIKey) {
            (id, name, scopes, createdAt) = (k.id, k.name, k.scopes.sorted().joined(separator: ", "), ISODate.string(k.createdAt))
            (lastUsedAt, active) = (k.lastUsedAt.map(ISODate.string), k.isActive)
        }
    }

    @Sendable func keys(_ request: Request, context: AppRequestContext) async throws -> Response {
        let op = try await gate.require(request, context)
        let keys = try await apiKeys.list(logger: context.logger).map(KeyLine.init)
        return pages.page("keys", KeysView(chrome: Chrome("API keys", op), csrf: op.csrf, keys: keys))
    }

    /// Creates a key; its secret is on the result page once and never again.
    @Sendable func createKey(_ request: Request, context: AppRequestContext) async throws -> Response {
        let op = try await gate.require(request, context)
        let (form, authorise) = try await gate.lastingAccessForm(request, context, from: op)
        let scopes = try form.required("scopes", label: "Scopes").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty }
        let (key, secret) = try await apiKeys.create(
            name: try form.required("name", label: "Name"), scopes: scopes, actor: op.actor, ip: context.clientIP, createdBy: .session(op.session),
            authorise: authorise, logger: context.logger)
        return try await pages.result(
            "API key created", ["Key \(key.name) (\(key.id)) with scopes \(key.scopes.sorted().joined(separator: ", "))."], secret: secret, op: op,
            auth: auth, back: "/console/keys", backLabel: "API keys", logger: context.logger)
    }

    @Sendable func revokeKey(_ request: Request, context: AppRequestContext) async throws -> Response {
        let op = try await gate.require(request, context)
        _ = try await gate.form(request, context, from: op)
        let id = try context.pathParameter("id")
        guard try await apiKeys.revoke(id: id, actor: op.actor, ip: context.clientIP, logger: context.logger) else {
            throw Problem.notFound("No live API key with id \(id.prefix(64)).")
        }
        return try await pages.result(
            "API key revoked", ["Key \(id) is revoked: services using it are refused from now on."], op: op, auth: auth, back: "/console/keys",
            backLabel: "API keys", logger: context.logger)
    }

    struct AuditView {
        let chrome: Chrome; let userId: String; let actor: String; let action: String; let entries: [ConsolePages.AuditLine]; let next: String?
    }

    /// The audit trail, newest first, filtered by user, actor and action, 50 a page (keyset cursor).
    @Sendable func audit(_ request: Request, context: AppRequestContext) async throws -> Response {
        let op = try await gate.require(request, context)
        let parameters = request.uri.queryParameters
        func text(_ name: String) -> String? {
            parameters[Substring(name)].map(String.init).flatMap { $0.isEmpty ? nil : String($0.prefix(200)) }
        }
        var query = AuditQuery()
        (query.userID, query.actor, query.action, query.cursor) = (text("userId"), text("actor"), text("action"), text("cursor"))
        let page = try await auth.auditTrail(query, logger: context.logger)
        let next = page.nextCursor.map { cursor in
            ConsoleLinks.query(
                "/console/audit", [("userId", query.userID), ("actor", query.actor), ("action", query.action), ("cursor", cursor)])
        }
        return pages.page(
            "audit",
            AuditView(
                chrome: Chrome("Audit trail", op), userId: query.userID ?? "", actor: query.actor ?? "", action: query.action ?? "",
                entries: page.entries.map(ConsolePages.AuditLine.init), next: next))
    }
}

/// Links with query strings, each value percent-encoded.
enum ConsoleLinks {
    static func query(_ path: String, _ items: [(String, String?)]) -> String {
        var components = URLComponents()
        components.path = path
        components.queryItems = items.compactMap { name, value in value.map { URLQueryItem(name: name, value: $0) } }
        return components.string ?? path
    }

    /// A path segment (an id typed by someone) percent-encoded.
    static func segment(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? ""
    }
}
