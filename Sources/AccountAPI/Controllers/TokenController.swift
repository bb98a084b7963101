import Auth
import Entitlements
import Hummingbird
import Ledger

/// The signed-in user's tokens and subscription.
struct TokenController: Sendable {
    let entitlements: EntitlementService
    let ledger: LedgerService
    let auth: AuthService
    let authenticator: Authenticator

    func addRoutes(to router: Router<AppRequestContext>) {
        router.get("/api/user/subscription", use: subscription)
        router.get("/api/user/token-balance", use: balance)
        router.get("/api/user/token-history", use: history)
    }

    @Sendable func subscription(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<SubscriptionJSON> {
        let session = try await authenticator.session(request, context)
        return JSONResponse(SubscriptionJSON(try await entitlements.subscriptionView(userID: session.user.id, logger: context.logger)))
    }

    @Sendable func balance(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<TokenBalanceJSON> {
        let session = try await authenticator.session(request, context)
        return JSONResponse(TokenBalanceJSON(try await entitlements.tokenBalance(userID: session.user.id, logger: context.logger)))
    }

    /// The account's history: an account action (owner profile only).
    @Sendable func history(_ request: Request, context: AppRequestContext) async throws -> JSONResponse<HistoryJSON> {
        let session = try await authenticator.session(request, context)
        try auth.requireOwnerProfile(session)
        let (limit, cursor) = try HistoryJSON.page(request)
        return JSONResponse(HistoryJSON(try await ledger.history(userID: session.user.id, limit: limit, cursor: cursor, logger: context.logger)))
    }
}
