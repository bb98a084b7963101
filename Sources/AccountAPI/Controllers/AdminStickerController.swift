import Entitlements
import Foundation
import Hummingbird
import Media

/// Operators fill packs: upload images (multipart), rename, retag, reorder or delete stickers, and upload a pack's icon.
/// Every change is audited.
struct AdminStickerController: Sendable {
    let content: StickerContentService
    let stickers: StickerService
    let media: MediaServices
    let authenticator: Authenticator

    struct StickersResponse: Encodable, Sendable { let stickers: [StickerJSON] }
    struct StickerChange: Decodable { let name: String?; let tags: [String]?; let sortOrder: Int? }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.post("/api/admin/stickers/pack/:packId/stickers", use: upload)
        router.patch("/api/admin/stickers/:stickerId", use: change)
        router.delete("/api/admin/stickers/:stickerId", use: delete)
        router.post("/api/admin/stickers/packs/:id/icon", use: icon)
    }

    /// Parts named `file` (at most 20); optional `name` (one file only) and `tags` (comma-separated). Each image is
    /// checked by content, thumbnailed and stored before its row is written.
    @Sendable func upload(_ request: Request, context: AppRequestContext) async throws -> Response {
        let actor = try await authenticator.requireOperator(request, context)
        let packID = try context.pathParameter("packId")
        guard try await content.packExists(packID, logger: context.logger) else { throw EntitlementError.packNotFound }
        var request = request
        let parts = try await Multipart.parts(&request, context: context, limit: MediaServices.maxUploadBody)
        let added = try await PackUploads(content: content, media: media).add(
            parts, packID: packID, actor: actor, ip: context.clientIP, logger: context.logger)
        return try JSONResponse(StickersResponse(stickers: added.map { media.json($0, signed: false) }), status: .created)
            .response(from: request, context: context)
    }

    @Sendable func change(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<StickerJSON> {
        let actor = try await authenticator.requireOperator(request, context)
        var request = request
        let body = try await request.decodeJSON(StickerChange.self, context: context)
        if let name = body.name, Sticker.cleanName(name) != name || name.count > 100 {
            throw Problem.validation("name must be 1 to 100 characters (at most 400 bytes), without control characters.")
        }
        if let order = body.sortOrder, Int64(order).magnitude > Sticker.maxSortOrder.magnitude {
            throw Problem.validation("sortOrder must be from -\(Sticker.maxSortOrder) to \(Sticker.maxSortOrder).")
        }
        if let tags = body.tags, tags.count > 20 || tags.contains(where: { $0.isEmpty || Sticker.cleanTag($0) != $0 }) {
            throw Problem.validation("tags: at most 20, each 1 to 40 characters.")
        }
        let sticker = try await content.update(
            id: try context.pathParameter("stickerId"), name: body.name, tags: body.tags, sortOrder: body.sortOrder, actor: actor,
            ip: context.clientIP, logger: context.logger)
        return JSONResponse(media.json(sticker, signed: false))
    }

    @Sendable func delete(_ request: Request, context: AppRequestContext) async throws -> Response {
        let actor = try await authenticator.requireOperator(request, context)
        try await content.delete(id: try context.pathParameter("stickerId"), actor: actor, ip: context.clientIP, logger: context.logger)
        return Response(status: .noContent)
    }

    /// One image (part `file`) becomes the pack's icon: checked like a sticker, stored as its 100 px thumbnail (public).
    @Sendable func icon(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<StickerPack> {
        let actor = try await authenticator.requireOperator(request, context)
        let packID = try context.pathParameter("id")
        var request = request
        let parts = try await Multipart.parts(&request, context: context, limit: 1024 * 1024)
        guard let file = parts.first(where: { $0.name == "file" }) else { throw Problem.validation("Send the icon as a part named 'file'.") }
        let stored = try await media.store(Data(file.body), owner: actor, logger: context.logger)
        do {
            let pack = try await stickers.setIcon(
                packID: packID, url: media.signer.publicURL(stored.thumbnailKey), unusedKeys: [stored.imageKey], actor: actor, ip: context.clientIP,
                logger: context.logger)
            return JSONResponse(pack)
        } catch {
            await content.queueFileRemovals([stored.imageKey, stored.thumbnailKey], logger: context.logger)
            throw error
        }
    }
}
