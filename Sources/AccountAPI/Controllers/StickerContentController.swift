import Auth
import Entitlements
import Foundation
import HTTPTypes
import Hummingbird
import Media
import MultipartKit
import NIOCore

/// Stickers inside packs: the app lists a pack's stickers (premium files as signed, expiring URLs), operators upload
/// images (multipart), and `/media/…` serves the files: public ones to anyone, premium ones only with a valid signature.
struct StickerContentController: Sendable {
    let content: StickerContentService
    let media: MediaServices
    let authenticator: Authenticator

    struct StickerJSON: Encodable, Sendable {
        let id: String; let packId: String; let name: String; let imageUrl: String; let thumbnailUrl: String; let width: Int; let height: Int
        let fileType: String; let tags: [String]; let isAnimated: Bool; let sortOrder: Int; let usageCount: Int
    }
    struct StickersResponse: Encodable, Sendable { let stickers: [StickerJSON] }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.get("/api/stickers/pack/:packId", use: packStickers)
        router.post("/api/admin/stickers/pack/:packId/stickers", use: upload)
        router.get("/media/:key", use: file)
    }

    func json(_ sticker: Sticker, premium: Bool) -> StickerJSON {
        let now = Date()
        let url = { (key: String) in premium ? media.signer.signedURL(key, now: now) : media.signer.publicURL(key) }
        return StickerJSON(
            id: sticker.id, packId: sticker.packID, name: sticker.name, imageUrl: url(sticker.file.imageKey),
            thumbnailUrl: url(sticker.file.thumbnailKey),
            width: sticker.file.width, height: sticker.file.height, fileType: sticker.file.fileType, tags: sticker.tags,
            isAnimated: sticker.file.isAnimated,
            sortOrder: sticker.sortOrder, usageCount: sticker.usageCount)
    }

    @Sendable func packStickers(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<StickersResponse> {
        let session = try await authenticator.session(request, context)
        do {
            let found = try await content.stickers(userID: session.user.id, packID: try context.parameters.require("packId"), logger: context.logger)
            return JSONResponse(StickersResponse(stickers: found.stickers.map { json($0, premium: found.premium) }))
        } catch EntitlementError.packLocked(let previews) {
            throw EntitlementError.packLocked(previewKeys: previews).problem.with(
                "previewStickers", .strings(previews.map { media.signer.publicURL($0) }))
        }
    }

    /// Operators add one or more images (multipart/form-data, parts named `file`; optional `name` and `tags` parts
    /// apply when one file is sent). Each is checked by content, thumbnailed and stored before its row is written.
    @Sendable func upload(_ request: Request, context: AppRequestContext) async throws -> Response {
        let actor = try await authenticator.requireOperator(request, context)
        let packID = try context.parameters.require("packId")
        var request = request
        let parts = try await Self.multipart(&request, context: context)
        let files = parts.filter { $0.name == "file" }
        guard !files.isEmpty else { throw Problem.validation("Send the images as multipart/form-data parts named 'file'.") }
        guard files.count <= 20 else { throw Problem.validation("At most 20 images per request.") }
        let givenName = parts.first { $0.name == "name" }.map { String(buffer: $0.body) }
        let tags =
            parts.first { $0.name == "tags" }.map { String(buffer: $0.body).split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } }
            ?? []
        var added: [StickerJSON] = []
        for file in files {
            let name = (files.count == 1 ? givenName : nil) ?? Self.fileStem(file) ?? "sticker"
            let stored = try await media.store(Data(file.body.readableBytesView))
            let sticker = try await content.add(
                packID: packID, name: String(name.prefix(100)), tags: Array(tags.prefix(20).map { String($0.prefix(40)) }), image: stored,
                actor: actor, ip: context.clientIP, logger: context.logger)
            added.append(json(sticker, premium: false))
        }
        return try JSONResponse(StickersResponse(stickers: added), status: .created).response(from: request, context: context)
    }

    /// A stored file: immutable (content-addressed), with an ETag and byte ranges; premium files need a valid signature.
    @Sendable func file(_ request: Request, context: AppRequestContext) async throws -> Response {
        let key = try context.parameters.require("key")
        let query = request.uri.queryParameters
        switch try await content.access(blobKey: key, logger: context.logger) {
        case .unknown: throw Problem.notFound("No such file.")
        case .signedOnly:
            guard media.signer.verify(key, exp: query["exp"].map(String.init), sig: query["sig"].map(String.init), now: Date()) else {
                throw Problem(.forbidden, code: "forbidden", detail: "This file needs a valid, unexpired signed URL (from the pack's sticker list).")
            }
        case .publicFile: break
        }
        guard let data = try await media.blobs.get(key) else { throw Problem.notFound("No such file.") }
        return MediaResponse.make(data, key: key, request: request)
    }

    static func multipart(_ request: inout Request, context: AppRequestContext) async throws -> [MultipartPart] {
        let type = request.headers[.contentType] ?? ""
        guard type.lowercased().hasPrefix("multipart/form-data"),
            let boundary = type.split(separator: ";").map({ $0.trimmingCharacters(in: .whitespaces) }).first(where: {
                $0.lowercased().hasPrefix("boundary=")
            })
            .map({ String($0.dropFirst("boundary=".count)).trimmingCharacters(in: CharacterSet(charactersIn: "\"")) })
        else { throw Problem(.unsupportedMediaType, code: "validation_failed", detail: "Content-Type must be multipart/form-data with a boundary.") }
        let body = try await request.collectBody(upTo: 12 * 1024 * 1024)
        var parts: [MultipartPart] = []
        var headers: [(String, String)] = []
        var current = ByteBuffer()
        let parser = MultipartParser(boundary: boundary)
        parser.onHeader = { headers.append(($0, $1)) }
        parser.onBody = { current.writeBuffer(&$0) }
        parser.onPartComplete = {
            parts.append(MultipartPart(headers: .init(headers), body: current))
            (headers, current) = ([], ByteBuffer())
        }
        do { try parser.execute(body) } catch { throw Problem.validation("The multipart body could not be read.") }
        return parts
    }

    static func fileStem(_ part: MultipartPart) -> String? {
        guard let disposition = part.headers.first(name: "Content-Disposition"),
            let range = disposition.range(of: "filename=\"")
        else { return nil }
        let name = disposition[range.upperBound...].prefix { $0 != "\"" }
        let stem = name.split(separator: ".").dropLast().joined(separator: ".")
        return stem.isEmpty ? (name.isEmpty ? nil : String(name)) : stem
    }
}
