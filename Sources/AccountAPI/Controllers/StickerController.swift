import Auth
import Entitlements
import Hummingbird
import Ledger
import Media

/// Sticker packs for the signed-in user: the catalog with what is locked, and unlocks paid with tokens.
struct StickerController: Sendable {
    let stickers: StickerService
    let content: StickerContentService
    let media: MediaServices
    let authenticator: Authenticator

    struct PacksResponse: Encodable, Sendable { let packs: [StickerPackJSON] }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.get("/api/stickers/packs", use: packs)
        router.post("/api/stickers/packs/:id/unlock", use: unlock)
    }

    @Sendable func packs(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<PacksResponse> {
        let session = try await authenticator.session(request, context)
        let profile = try await authenticator.permissions(session, context)
        let views = try await stickers.packs(for: session.user.id, maxRating: profile?.maxContentRating, logger: context.logger)
        let summaries = try await content.summaries(logger: context.logger)
        return JSONResponse(
            PacksResponse(
                packs: views.map { view in
                    let summary = summaries[view.pack.id].map { ($0.count, $0.previews.map(media.signer.publicURL)) }
                    return StickerPackJSON(view, summary: summary)
                }))
    }

    /// Charged once; with an `Idempotency-Key` a retry replays the first answer (a refusal too). On a profile that cannot
    /// make purchases, a locked premium pack becomes a purchase request for the owner: 202.
    @Sendable func unlock(_ request: Request, context: AppRequestContext) async throws -> Response {
        let session = try await authenticator.session(request, context)
        let packID = try context.pathParameter("id")
        let profile = try await authenticator.permissions(session, context)
        let userID = session.user.id
        guard request.headers[.idempotencyKey] != nil else {
            let result = try await stickers.unlock(userID: userID, packID: packID, profile: profile, logger: context.logger)
            return try JSONResponse(UnlockJSON(result), status: UnlockJSON.status(result)).response(from: request, context: context)
        }
        // Keys are the acting profile's: another profile of the account replaying one gets its own answer, never the first's.
        let identity = IdempotentRequest(
            caller: "user:\(userID)" + (profile.map { ":profile:\($0.id)" } ?? ""), key: try IdempotentResponse.key(request),
            fields: ["endpoint": "unlock", "packId": packID])
        let answer = try await stickers.unlock(
            identity, userID: userID, packID: packID, profile: profile, logger: context.logger)
        return try IdempotentResponse.response(answer, UnlockJSON.status, UnlockJSON.init)
    }
}
