import Billing
import Entitlements
import Foundation
import Hummingbird

/// Operators manage the sticker-pack catalog (deleting deactivates; unlocks are kept) and read every received billing
/// event. Changes are audited.
struct AdminCatalogController: Sendable {
    let stickers: StickerService
    let billing: BillingService
    let authenticator: Authenticator

    struct PacksResponse: Encodable, Sendable { let packs: [StickerPack] }
    struct EventJSON: Encodable, Sendable {
        let id: String; let provider: String; let source: String; let externalId: String?; let eventType: String?; let userId: String?
        let originalId: String?; let environment: String?; let outcome: String; let detail: String?; let signedAt: String?; let receivedAt: String
        let appliedAt: String?; let rawSha256: String; let raw: String

        init(_ e: BillingEvent) {
            (id, provider, source, externalId, eventType, userId) = (e.id, e.provider, e.source, e.externalID, e.eventType, e.userID)
            (originalId, environment, outcome, detail) = (e.originalID, e.environment, e.outcome.rawValue, e.detail)
            (signedAt, receivedAt, appliedAt) = (e.signedAt.map(ISODate.string), ISODate.string(e.receivedAt), e.appliedAt.map(ISODate.string))
            (rawSha256, raw) = (e.rawSHA256, e.raw)
        }
    }
    struct EventsResponse: Encodable, Sendable { let events: [EventJSON]; let nextCursor: String? }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.get("/api/admin/stickers/packs", use: packs)
        router.post("/api/admin/stickers/packs", use: createPack)
        router.put("/api/admin/stickers/packs/:id", use: replacePack)
        router.delete("/api/admin/stickers/packs/:id", use: deactivatePack)
        router.get("/api/admin/billing/events", use: billingEvents)
    }

    @Sendable func packs(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<PacksResponse> {
        _ = try await authenticator.requireOperator(request, context)
        return JSONResponse(PacksResponse(packs: try await stickers.catalog(logger: context.logger)))
    }

    @Sendable func createPack(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<StickerPack> {
        let actor = try await authenticator.requireOperator(request, context)
        var request = request
        let pack = try await request.decodeJSON(StickerPack.self, context: context)
        try await stickers.save(pack, create: true, actor: actor, ip: context.clientIP, logger: context.logger)
        return JSONResponse(pack, status: .created)
    }

    /// Changes the fields the body names; omitted ones keep their current values (a rename never makes a paid pack free).
    @Sendable func replacePack(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<StickerPack> {
        let actor = try await authenticator.requireOperator(request, context)
        let id = try context.pathParameter("id")
        var request = request
        let changes = try await request.decodeJSON([String: JSONValue].self, context: context)
        if let given = changes["id"], given != .string(id) { throw Problem.validation("The body's id must match the path (or be left out).") }
        // Only the icon may be removed with null; any other null would quietly reset a field to its default (a rated pack
        // to `all`, a paid one to free), so it is refused, as a value of the wrong type is.
        if let field = changes.keys.sorted().first(where: { changes[$0] == .null && $0 != "iconUrl" }) {
            throw Problem.validation("Field '\(field.prefix(64))' must not be null (leave it out to keep its value; only iconUrl may be null).")
        }
        guard let current = try await stickers.catalog(logger: context.logger).first(where: { $0.id == id }) else {
            throw Problem.notFound("No sticker pack with this id.")
        }
        let pack = try PackChanges.applying(changes, to: current)
        try await stickers.save(pack, create: false, actor: actor, ip: context.clientIP, logger: context.logger)
        return JSONResponse(pack)
    }

    @Sendable func deactivatePack(_ request: Request, context: AppRequestContext) async throws -> Response {
        let actor = try await authenticator.requireOperator(request, context)
        try await stickers.deactivate(id: try context.pathParameter("id"), actor: actor, ip: context.clientIP, logger: context.logger)
        return Response(status: .noContent)
    }

    @Sendable func billingEvents(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<EventsResponse> {
        _ = try await authenticator.requireOperator(request, context)
        let query = request.uri.queryParameters
        let limit =
            try query["limit"].map { raw -> Int in
                guard let n = Int(String(raw)), (1...200).contains(n) else { throw Problem.validation("limit must be from 1 to 200.") }
                return n
            } ?? 50
        let provider = query["provider"].map(String.init)
        if let provider, provider != "apple" && provider != "stripe" { throw Problem.validation("provider must be apple or stripe.") }
        let before = try query["cursor"].map { raw -> BillingCursor in
            guard let cursor = BillingCursor(String(raw)) else { throw Problem.validation("cursor must be a nextCursor from an earlier page.") }
            return cursor
        }
        let events = try await billing.events(
            userID: query["userId"].map(String.init), provider: provider, limit: limit, before: before, logger: context.logger)
        let next = events.count == limit ? events.last.map { BillingCursor(receivedAt: $0.receivedAt, id: $0.id).description } : nil
        return JSONResponse(EventsResponse(events: events.map(EventJSON.init), nextCursor: next))
    }
}
