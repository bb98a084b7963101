import Auth
import Clock
import Crypto
import Entitlements
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Media
import NIOCore
import Storage

/// Stickers for apps: a pack's stickers (premium and own files as signed, expiring URLs), recent, search, uses, the
/// editor catalog, own uploads; and `/media/…`, which serves public files to anyone and private ones only with a valid
/// signature.
struct StickerContentController: Sendable {
    let content: StickerContentService
    let reads: SessionReads
    let media: MediaServices
    let authenticator: Authenticator

    struct StickersResponse: Encodable, Sendable { let stickers: [StickerJSON] }
    struct SearchResponse: Encodable, Sendable {
        let stickers: [StickerJSON]
        let nextCursor: String?

        enum CodingKeys: String, CodingKey { case stickers, nextCursor }

        /// `nextCursor` is always present (null on the last page), as the contract says.
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(stickers, forKey: .stickers)
            try container.encode(nextCursor, forKey: .nextCursor)
        }
    }
    struct UploadResponse: Encodable, Sendable { let sticker: StickerJSON }
    struct Success: Encodable, Sendable { let success: Bool }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.get("/api/stickers/pack/:packId", use: packStickers)
        router.get("/api/stickers/recent", use: recent)
        router.get("/api/stickers/search", use: search)
        router.get("/api/stickers/catalog", use: catalog)
        router.post("/api/stickers/upload", use: upload)
        router.post("/api/stickers/:stickerId/use", use: use)
        router.delete("/api/stickers/:stickerId", use: deleteUpload)
        router.get("/media/:key", use: file)
    }

    @Sendable func packStickers(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<StickersResponse> {
        let session = try await authenticator.session(request, context)
        let viewer = try await profile(session, context).viewer
        do {
            let list = try await content.stickers(
                userID: session.user.id, packID: try context.pathParameter("packId"), viewer: viewer, logger: context.logger)
            return JSONResponse(StickersResponse(stickers: media.json(list)))
        } catch EntitlementError.packLocked(let previews) {
            throw EntitlementError.packLocked(previewKeys: previews).problem.with("previewStickers", .strings(previews.map(media.signer.publicURL)))
        }
    }

    /// The profile acting (the owner's when none is selected; "account" for uses when there is none) and what it may
    /// see; a selection that is gone must be made again.
    func profile(_ session: AuthenticatedSession, _ context: AppRequestContext) async throws -> (id: String, viewer: ContentViewer) {
        let permissions = try await authenticator.permissions(session, context)
        return (permissions?.id ?? "account", ContentViewer(profileID: permissions?.id, maxRating: permissions?.maxContentRating))
    }

    @Sendable func recent(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<StickersResponse> {
        let session = try await authenticator.session(request, context)
        let profile = try await profile(session, context)
        let list = try await content.recent(userID: session.user.id, profileID: profile.id, viewer: profile.viewer, logger: context.logger)
        return JSONResponse(StickersResponse(stickers: media.json(list)))
    }

    /// `q` (1–100 characters) in names and tags; `limit` 1–100 (default 30); `cursor` from the previous page.
    @Sendable func search(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<SearchResponse> {
        let session = try await authenticator.session(request, context)
        let query = request.uri.queryParameters
        let q = query["q"].map(String.init)?.trimmingCharacters(in: .whitespaces) ?? ""
        guard (1...100).contains(q.count) else { throw Problem.validation("q must be 1 to 100 characters.") }
        let limit =
            try query["limit"].map { raw -> Int in
                guard let n = Int(String(raw)), (1...100).contains(n) else { throw Problem.validation("limit must be from 1 to 100.") }
                return n
            } ?? 30
        let offset =
            try query["cursor"].map { raw -> Int in
                guard let n = Int(String(raw)), (0...10_000).contains(n) else {
                    throw Problem.validation("cursor must be a nextCursor from an earlier page.")
                }
                return n
            } ?? 0
        let viewer = try await profile(session, context).viewer
        let found = try await content.search(
            userID: session.user.id, viewer: viewer, query: q, limit: limit, offset: offset, logger: context.logger)
        return JSONResponse(SearchResponse(stickers: media.json(found), nextCursor: found.stickers.count == limit ? String(offset + limit) : nil))
    }

    @Sendable func use(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<Success> {
        let session = try await authenticator.session(request, context)
        let profile = try await profile(session, context)
        try await content.use(
            userID: session.user.id, profileID: profile.id, viewer: profile.viewer, stickerID: try context.pathParameter("stickerId"),
            logger: context.logger)
        return JSONResponse(Success(success: true))
    }

    /// The packs this user can use as an editor SDK's categories. The ETag is the catalog's version (what it depends on)
    /// and the URL-signing window, so a revalidation answers 304 after one statement, without rendering; on PostgreSQL
    /// that statement also checks the session and is shared by concurrent revalidations (as the entitlement snapshot's).
    @Sendable func catalog(_ request: Request, context: AppRequestContext) async throws -> Response {
        if let match = request.headers[.ifNoneMatch] {
            let hash = try await authenticator.sessionTokenHash(request, context)
            // The acting profile's maximum rating is part of the version; a gone selection never matches (answered below).
            if let version = try await reads.catalogVersion(sessionTokenHash: hash, logger: context.logger).version,
                IfNoneMatch.matches(match, catalogETag(version))
            {
                return Response(status: .notModified, headers: [.eTag: catalogETag(version)])
            }
        }
        let session = try await authenticator.session(request, context)
        return try await renderCatalog(userID: session.user.id, viewer: try await profile(session, context).viewer, context: context)
    }

    func renderCatalog(userID: String, viewer: ContentViewer, context: AppRequestContext) async throws -> Response {
        let usable = try await content.usable(userID: userID, viewer: viewer, logger: context.logger)
        let body = try StickerCatalog.render(packs: usable.packs, list: usable.list, media: media)
        return Response(
            status: .ok, headers: [.contentType: "application/json; charset=utf-8", .eTag: catalogETag(usable.version)],
            body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }

    func catalogETag(_ version: String) -> String {
        let window = Int(media.clock.now().timeIntervalSince1970) / media.signer.windowSeconds
        let digest = SHA256.hash(data: Data("\(version)|\(window)|\(media.signer.baseURL)".utf8))
        return "\"" + digest.prefix(16).map { String(format: "%02x", $0) }.joined() + "\""
    }

    /// One image (a part named `file`, optional `name`) into the user's own pack, within their allowance (reserved first).
    @Sendable func upload(_ request: Request, context: AppRequestContext) async throws -> Response {
        let uploader = try await uploader(request, context)
        var request = request
        let parts = try await Multipart.parts(&request, context: context, limit: 1024 * 1024)
        guard let file = parts.first(where: { $0.name == "file" }), parts.filter({ $0.name == "file" }).count == 1 else {
            throw Problem.validation("Send one image as a multipart/form-data part named 'file'.")
        }
        let sticker = try await content.upload(
            Data(file.body), name: Multipart.text(parts, "name"), fileStem: Multipart.fileStem(file), by: uploader, logger: context.logger)
        return try JSONResponse(UploadResponse(sticker: media.json(sticker, signed: true)), status: .created).response(
            from: request, context: context)
    }

    /// Needs the same permission as an upload; files nothing uses any more leave the blob store.
    @Sendable func deleteUpload(_ request: Request, context: AppRequestContext) async throws -> Response {
        let uploader = try await uploader(request, context)
        try await content.deleteUpload(stickerID: try context.pathParameter("stickerId"), by: uploader, logger: context.logger)
        return Response(status: .noContent)
    }

    /// The account and acting profile changing the account's own stickers (the owner's when none is selected).
    func uploader(_ request: Request, _ context: AppRequestContext) async throws -> Uploader {
        let session = try await authenticator.session(request, context)
        let permissions = try await authenticator.permissions(session, context)
        return Uploader(
            userID: session.user.id, viewer: ContentViewer(profileID: permissions?.id, maxRating: permissions?.maxContentRating),
            mayChangeOwnStickers: permissions?.canUseCustomContentTypes ?? true, authorise: authenticator.auth.stillLive(session))
    }

    /// A stored file: immutable (content-addressed), with an ETag and byte ranges; private files need a valid signature.
    @Sendable func file(_ request: Request, context: AppRequestContext) async throws -> Response {
        let key = try context.pathParameter("key")
        guard FileBlobStore.isValidKey(key) else { throw Problem.notFound("No such file.") }
        let query = request.uri.queryParameters
        switch try await content.access(blobKey: key, logger: context.logger) {
        case .unknown: throw Problem.notFound("No such file.")
        case .signedOnly:
            guard media.signer.verify(key, exp: query["exp"].map(String.init), sig: query["sig"].map(String.init), now: media.clock.now()) else {
                throw Problem(.forbidden, code: "forbidden", detail: "This file needs a valid, unexpired signed URL (from the sticker list).")
            }
        case .publicFile: break
        }
        guard let data = try await media.blobs.get(key) else { throw Problem.notFound("No such file.") }
        return MediaResponse.make(data, key: key, request: request)
    }
}
