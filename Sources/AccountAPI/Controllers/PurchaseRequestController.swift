import Auth
import Entitlements
import Hummingbird

/// Ask to buy: the account's purchase requests, approved or declined by the owner.
struct PurchaseRequestController: Sendable {
    let stickers: StickerService
    let profiles: ProfileService
    let authenticator: Authenticator

    struct ApproveRequest: Decodable { let pin: String? }
    struct ListResponse: Encodable, Sendable { let purchaseRequests: [PurchaseRequestJSON] }

    func addRoutes(to router: Router<AppRequestContext>) {
        router.get("/api/purchase-requests", use: list)
        router.post("/api/purchase-requests/:id/approve", use: approve)
        router.post("/api/purchase-requests/:id/decline", use: decline)
    }

    /// The owner's profile sees every request of the account; any other profile only its own.
    @Sendable func list(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<ListResponse> {
        let session = try await authenticator.session(request, context)
        let current = try await authenticator.profile(of: session, context)
        guard let profile = current.profile else { throw AuthError.profileSelectionRequired }
        let requests = try await stickers.purchaseRequests(
            userID: session.user.id, profileID: profile.isDefault ? nil : profile.id, logger: context.logger)
        return JSONResponse(ListResponse(purchaseRequests: requests.map(PurchaseRequestJSON.init)))
    }

    /// The owner's consent (on the owner's profile, with its PIN when it has one): captured and unlocked once.
    @Sendable func approve(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<PurchaseRequestJSON> {
        let session = try await authenticator.session(request, context)
        var request = request
        let body = try await request.decodeJSON(ApproveRequest.self, context: context, emptyMeans: "{}")
        let consent = try await profiles.ownerConsent(session, pin: body.pin, logger: context.logger)
        let approved = try await stickers.approvePurchase(
            userID: session.user.id, requestID: try context.pathParameter("id"), authorise: consent, logger: context.logger)
        return JSONResponse(PurchaseRequestJSON(approved))
    }

    @Sendable func decline(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<PurchaseRequestJSON> {
        let session = try await authenticator.session(request, context)
        guard try await authenticator.profile(of: session, context).profile?.isDefault == true else { throw AuthError.ownerProfileRequired }
        let declined = try await stickers.declinePurchase(
            userID: session.user.id, requestID: try context.pathParameter("id"), authorise: authenticator.auth.stillLive(session),
            logger: context.logger)
        return JSONResponse(PurchaseRequestJSON(declined))
    }
}
