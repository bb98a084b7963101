import Auth
import Entitlements
import Foundation
import Hummingbird
import Ledger
import Media

/// The catalog in the console: plans (read-only, from the plans file) and sticker packs — create, edit, deactivate, and
/// upload stickers — through the service functions of `/api/admin/stickers/…` (the same validation and audit rows).
struct ConsoleCatalogController: Sendable {
    let gate: ConsoleGate
    let pages: ConsolePages
    let auth: AuthService
    let stickers: StickerService
    let catalog: PlanCatalog
    let uploads: PackUploads

    func addRoutes(to group: RouterGroup<AppRequestContext>) {
        group.get("catalog", use: catalogPage)
        group.post("catalog/packs", use: createPack)
        group.get("catalog/packs/:id", use: packPage)
        group.post("catalog/packs/:id", use: editPack)
        group.post("catalog/packs/:id/deactivate", use: deactivatePack)
        group.post("catalog/packs/:id/stickers", use: upload)
    }

    struct CatalogView { let chrome: Chrome; let csrf: String; let plans: [PlanLine]; let packs: [PackLine]; let categories: [String] }
    struct PlanLine { let id: String; let name: String; let monthlyTokens: Int; let profiles: Int }
    struct PackLine {
        let id: String; let name: String; let description: String; let category: String; let price: Int64; let rating: String
        let stickers: Int64; let active: Bool; let iconURL: String?; let previews: [String]; let sortOrder: Int64
        /// `summary`: the pack's sticker count and first thumbnails' URLs (the content's, as the app's pack list shows them).
        init(_ p: StickerPack, summary: (count: Int, previews: [String])?) {
            (id, name, description, category, price, rating) = (p.id, p.name, p.description, p.category, p.tokenPrice, p.contentRating.rawValue)
            (stickers, active, sortOrder) = (Int64(summary?.count ?? 0), p.isActive, p.sortOrder)
            // Only the service's own media, as same-origin paths: the console's CSP loads nothing from elsewhere.
            iconURL = p.iconUrl.flatMap(Self.ownPath)
            previews = (summary?.previews ?? []).compactMap(Self.ownPath)
        }

        static func ownPath(_ url: String) -> String? {
            if url.hasPrefix("/") && !url.hasPrefix("//") { return url }
            guard let parts = URLComponents(string: url), parts.path.hasPrefix("/media") else { return nil }
            return parts.path
        }
    }

    @Sendable func catalogPage(_ request: Request, context: AppRequestContext) async throws -> Response {
        let op = try await gate.require(request, context)
        let plans = catalog.plans.map { PlanLine(id: $0.id, name: $0.name, monthlyTokens: $0.monthlyTokens, profiles: $0.maxFamilyProfiles) }
        let summaries = try await summaries(context)
        let packs = try await stickers.catalog(logger: context.logger).map { PackLine($0, summary: summaries[$0.id]) }
        return pages.page(
            "catalog",
            CatalogView(chrome: Chrome("Catalog", op), csrf: op.csrf, plans: plans, packs: packs, categories: StickerPack.categories.sorted()))
    }

    static func formFields(_ form: ConsoleForm) throws -> [String: JSONValue] {
        var fields: [String: JSONValue] = [:]
        for name in ["name", "description", "category", "contentRating"] { if let value = form.text(name) { fields[name] = .string(value) } }
        if form.text("tokenPrice") != nil {
            fields["tokenPrice"] = .integer(try form.number("tokenPrice", label: "Price", in: 0...LedgerLimits.amountTokensMax))
        }
        if form.text("sortOrder") != nil { fields["sortOrder"] = .integer(try form.number("sortOrder", label: "Order", in: -1_000_000...1_000_000)) }
        return fields
    }

    @Sendable func createPack(_ request: Request, context: AppRequestContext) async throws -> Response {
        let op = try await gate.require(request, context)
        let form = try await gate.form(request, context, from: op)
        var fields = try Self.formFields(form)
        fields["id"] = .string(try form.required("id", label: "Id"))
        let pack = try PackChanges.decode(fields)
        try await stickers.save(pack, create: true, actor: op.actor, ip: context.clientIP, logger: context.logger)
        return try await result("Pack created", ["\(pack.name) (\(pack.id)) is in the catalog."], op: op, packID: pack.id, context: context)
    }

    /// Changes the fields the form fills; a changed price re-derives `isPremium`, as over the API.
    @Sendable func editPack(_ request: Request, context: AppRequestContext) async throws -> Response {
        let op = try await gate.require(request, context)
        let form = try await gate.form(request, context, from: op)
        let id = try context.pathParameter("id")
        guard let current = try await stickers.catalog(logger: context.logger).first(where: { $0.id == id }) else {
            throw Problem.notFound("No sticker pack with this id.")
        }
        let pack = try PackChanges.applying(try Self.formFields(form), to: current)
        try await stickers.save(pack, create: false, actor: op.actor, ip: context.clientIP, logger: context.logger)
        return try await result("Pack saved", ["\(pack.name) (\(pack.id)) is saved."], op: op, packID: id, context: context)
    }

    @Sendable func deactivatePack(_ request: Request, context: AppRequestContext) async throws -> Response {
        let op = try await gate.require(request, context)
        _ = try await gate.form(request, context, from: op)
        let id = try context.pathParameter("id")
        try await stickers.deactivate(id: id, actor: op.actor, ip: context.clientIP, logger: context.logger)
        return try await result("Pack deactivated", ["\(id) is out of the catalog; unlocks are kept."], op: op, packID: id, context: context)
    }

    /// Images as multipart parts named `file`, checked and thumbnailed as over the API.
    @Sendable func upload(_ request: Request, context: AppRequestContext) async throws -> Response {
        let op = try await gate.require(request, context)
        let id = try context.pathParameter("id")
        guard try await stickers.catalog(logger: context.logger).contains(where: { $0.id == id }) else {
            throw Problem.notFound("No sticker pack with this id.")
        }
        let parts = try await gate.multipart(request, context, from: op, limit: MediaServices.maxUploadBody)
        let added = try await uploads.add(parts, packID: id, actor: op.actor, ip: context.clientIP, logger: context.logger)
        return try await result(
            "Stickers uploaded", ["\(added.count) sticker(s) added to \(id): \(added.map(\.name).joined(separator: ", "))."], op: op, packID: id,
            context: context)
    }

    struct PackView { let chrome: Chrome; let csrf: String; let pack: PackLine; let categories: [String]; let ratings: [String] }

    @Sendable func packPage(_ request: Request, context: AppRequestContext) async throws -> Response {
        let op = try await gate.require(request, context)
        let id = try context.pathParameter("id")
        guard let pack = try await stickers.catalog(logger: context.logger).first(where: { $0.id == id }) else {
            throw Problem.notFound("No sticker pack with this id.")
        }
        return pages.page(
            "pack",
            PackView(
                chrome: Chrome(pack.name, op), csrf: op.csrf, pack: PackLine(pack, summary: try await summaries(context)[id]),
                categories: StickerPack.categories.sorted(),
                ratings: ContentRating.allCases.map(\.rawValue)))
    }

    /// Per pack: sticker count and the first thumbnails' URLs.
    func summaries(_ context: AppRequestContext) async throws -> [String: (count: Int, previews: [String])] {
        try await uploads.content.summaries(logger: context.logger).mapValues { ($0.count, $0.previews.map(uploads.media.signer.publicURL)) }
    }

    func result(_ title: String, _ lines: [String], op: ConsoleOperator, packID: String, context: AppRequestContext) async throws -> Response {
        try await pages.result(
            title, lines, op: op, auth: auth, back: "/console/catalog/packs/" + ConsoleLinks.segment(packID), backLabel: "Back to the pack",
            logger: context.logger)
    }
}
