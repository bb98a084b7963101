import Auth
import Entitlements
import Foundation
import HTTPTypes
import Hummingbird
import Ledger
import Logging
import Storage

/// A subscription as `GET /api/user/subscription` and the operator endpoints show it.
struct SubscriptionJSON: Encodable, Sendable {
    let planId: String
    let status: String?
    let provider: String?
    let currentPeriodStart: String?
    let currentPeriodEnd: String?
    let willRenew: Bool
    let pendingPlanId: String?
    /// Whether the plan's features apply now (false → the free plan applies).
    let isEntitled: Bool
    /// The plan whose features apply now.
    let plan: SubscriptionPlan

    init(_ subscription: Subscription?, currentPlan: SubscriptionPlan, now: Date) {
        planId = subscription?.planID ?? currentPlan.id
        status = subscription?.status.rawValue
        provider = subscription?.provider.rawValue
        currentPeriodStart = subscription.map { AuthRoutes.iso($0.currentPeriodStart) }
        currentPeriodEnd = subscription.map { AuthRoutes.iso($0.currentPeriodEnd) }
        willRenew = subscription?.willRenew ?? false
        pendingPlanId = subscription?.pendingPlanID
        isEntitled = subscription?.isEntitled(at: now) ?? false
        plan = currentPlan
    }
}

/// The current plan of every user, for profile limits.
struct CatalogProfileLimits: ProfilePlanLimits {
    let subscriptions: SubscriptionStore
    func maxFamilyProfiles(userID: String, now: Date, _ tx: any SQLExecutor) async throws -> Int {
        try await subscriptions.currentPlan(userID: userID, now: now, tx).maxFamilyProfiles
    }
}

/// `GET /api/user/subscription`.
struct SubscriptionRoutes: Sendable {
    let database: any Database
    let subscriptions: SubscriptionStore
    let clock: any TimeSource
    let authenticator: Authenticator

    func register(on router: Router<AppRequestContext>) {
        router.get("/api/user/subscription") { request, context in
            let session = try await authenticator.session(request, context)
            return JSONResponse(try await snapshot(userID: session.user.id, logger: context.logger))
        }
    }

    func snapshot(userID: String, logger: Logger) async throws -> SubscriptionJSON {
        let now = clock.now()
        return try await database.withConnection(logger: logger) { tx in
            SubscriptionJSON(
                try await subscriptions.subscription(userID: userID, tx), currentPlan: try await subscriptions.currentPlan(userID: userID, now: now, tx),
                now: now)
        }
    }
}

/// Operator endpoints: find users, manage their profiles, comp subscriptions. Every action is audited.
struct AdminRoutes: Sendable {
    let auth: AuthService
    let profiles: ProfileService
    let subscriptionRoutes: SubscriptionRoutes
    let authenticator: Authenticator
    let ledger: Ledger
    let ledgerRoutes: LedgerRoutes
    let tokenRoutes: TokenRoutes

    struct AdminGrantRequest: Codable { let amount: Int64; let bucket: Bucket; let reason: String?; let expiresAt: String?; let metadata: JSONValue? }

    struct UserJSON: Encodable, Sendable {
        let id: String; let email: String?; let name: String; let role: String; let emailVerified: Bool; let createdAt: String; let deleted: Bool
        init(_ s: UserSummary) {
            id = s.user.id
            email = s.user.email.isEmpty ? nil : s.user.email
            name = s.user.name
            role = s.user.role
            emailVerified = s.user.emailVerified
            createdAt = AuthRoutes.iso(s.createdAt)
            deleted = s.deleted
        }
    }
    struct UsersResponse: Encodable, Sendable { let users: [UserJSON] }
    struct CompRequest: Decodable { let planId: String; let periodEnd: String? }

    func register(on router: Router<AppRequestContext>) {
        router.get("/api/admin/users") { request, context in
            _ = try await authenticator.requireOperator(request, context)
            let email = request.uri.queryParameters["email"].map(String.init)
            let limit = request.uri.queryParameters["limit"].flatMap { Int(String($0)) } ?? 50
            return JSONResponse(UsersResponse(users: try await auth.findUsers(email: email, limit: limit, logger: context.logger).map(UserJSON.init)))
        }
        router.get("/api/admin/users/:userId") { request, context in
            _ = try await authenticator.requireOperator(request, context)
            return JSONResponse(UserJSON(try await auth.findUser(id: try context.parameters.require("userId"), logger: context.logger)))
        }
        router.get("/api/admin/users/:userId/profiles") { request, context in
            _ = try await authenticator.requireOperator(request, context)
            let userID = try await existingUser(context)
            return JSONResponse(try await profiles.available(userID: userID, logger: context.logger).map(ProfileJSON.init))
        }
        router.post("/api/admin/users/:userId/profiles") { request, context in
            let actor = try await authenticator.requireOperator(request, context)
            let userID = try await existingUser(context)
            var request = request
            let body = try await request.decodeJSON(ProfileRequest.self, context: context)
            let profile = try await profiles.create(userID: userID, input: body.input, by: .operatorActor(actor, ip: context.clientIP), logger: context.logger)
            return JSONResponse(ProfileJSON(profile), status: .created)
        }
        router.put("/api/admin/users/:userId/profiles/:id") { request, context in
            let actor = try await authenticator.requireOperator(request, context)
            let userID = try await existingUser(context)
            var request = request
            let body = try await request.decodeJSON(ProfileRequest.self, context: context)
            let profile = try await profiles.update(
                userID: userID, profileID: try context.parameters.require("id"), input: body.input, by: .operatorActor(actor, ip: context.clientIP),
                logger: context.logger)
            return JSONResponse(ProfileJSON(profile))
        }
        router.delete("/api/admin/users/:userId/profiles/:id") { request, context in
            let actor = try await authenticator.requireOperator(request, context)
            let userID = try await existingUser(context)
            try await profiles.delete(
                userID: userID, profileID: try context.parameters.require("id"), by: .operatorActor(actor, ip: context.clientIP), logger: context.logger)
            return Response(status: .noContent)
        }
        router.post("/api/admin/users/:userId/profiles/:id/reset-pin") { request, context in
            let actor = try await authenticator.requireOperator(request, context)
            let userID = try await existingUser(context)
            let profile = try await profiles.resetPIN(
                userID: userID, profileID: try context.parameters.require("id"), by: .operatorActor(actor, ip: context.clientIP), logger: context.logger)
            return JSONResponse(ProfileJSON(profile))
        }
        router.post("/api/admin/users/:userId/subscription") { request, context in
            let actor = try await authenticator.requireOperator(request, context)
            let userID = try await existingUser(context)
            var request = request
            let body = try await request.decodeJSON(CompRequest.self, context: context)
            return JSONResponse(try await comp(userID: userID, body: body, actor: actor, ip: context.clientIP, logger: context.logger))
        }
        router.post("/api/admin/users/:userId/grants") { request, context in
            let actor = try await authenticator.requireOperator(request, context)
            let userID = try await existingUser(context)
            var request = request
            let body = try await request.decodeJSON(AdminGrantRequest.self, context: context)
            let grant = LedgerRoutes.GrantRequest(
                userId: userID, amount: body.amount, bucket: body.bucket, reason: body.reason ?? "admin_grant", expiresAt: body.expiresAt, metadata: body.metadata)
            let response = try await ledgerRoutes.grant(grant, caller: actor, request: request, context: context, endpoint: "admin-grants")
            if response.status == .created && response.headers[.idempotentReplayed] == nil {
                try await subscriptionRoutes.database.transaction(logger: context.logger) { tx in
                    try await AuditLog.record(
                        tx, at: subscriptionRoutes.clock.now(), actor: actor, action: "admin_token_grant", subject: userID, ip: context.clientIP,
                        detail: "\(body.amount) \(body.bucket.rawValue)")
                }
            }
            return response
        }
        router.get("/api/admin/users/:userId/token-history") { request, context in
            _ = try await authenticator.requireOperator(request, context)
            let userID = try await existingUser(context)
            return JSONResponse(try await tokenRoutes.history(userID: userID, request: request, logger: context.logger))
        }
        router.get("/api/admin/users/:userId/token-balance") { request, context in
            _ = try await authenticator.requireOperator(request, context)
            let userID = try await existingUser(context)
            return JSONResponse(try await tokenRoutes.balance(userID: userID, logger: context.logger))
        }
        router.get("/api/admin/ledger/verify") { request, context in
            _ = try await authenticator.requireOperator(request, context)
            let report = try await subscriptionRoutes.database.withConnection(logger: context.logger) { try await ledger.verify($0) }
            return JSONResponse(report)
        }
        router.delete("/api/admin/users/:userId/subscription") { request, context in
            let actor = try await authenticator.requireOperator(request, context)
            let userID = try await existingUser(context)
            let store = subscriptionRoutes.subscriptions
            let ended = try await subscriptionRoutes.database.transaction(logger: context.logger) { tx in
                let now = subscriptionRoutes.clock.now()
                let ended = try await store.end(userID: userID, now: now, tx)
                if ended { try await AuditLog.record(tx, at: now, actor: actor, action: "admin_subscription_ended", subject: userID, ip: context.clientIP) }
                return ended
            }
            guard ended else { throw Problem.notFound("This user has no subscription.") }
            return Response(status: .noContent)
        }
    }

    /// A user id from the path that exists (another id answers 404).
    func existingUser(_ context: AppRequestContext) async throws -> String {
        let id = try context.parameters.require("userId")
        _ = try await auth.findUser(id: id, logger: context.logger)
        return id
    }

    func comp(userID: String, body: CompRequest, actor: String, ip: String, logger: Logger) async throws -> SubscriptionJSON {
        let store = subscriptionRoutes.subscriptions
        guard let plan = store.catalog.plan(id: body.planId), plan.isActive, !plan.isFreeTier else {
            throw Problem.validation("planId must be an active paid plan id from GET /api/subscription-plans.")
        }
        let now = subscriptionRoutes.clock.now()
        var periodEnd = Calendar(identifier: .gregorian).date(byAdding: .month, value: 1, to: now) ?? now.addingTimeInterval(30 * 86400)
        if let raw = body.periodEnd {
            guard let date = ISO8601DateFormatter.parse(raw) else { throw Problem.validation("periodEnd must be an ISO-8601 date-time.") }
            guard date > now else { throw Problem.validation("periodEnd must be in the future.") }
            periodEnd = date
        }
        let end = periodEnd
        let ledger = self.ledger
        try await subscriptionRoutes.database.transaction(logger: logger) { tx in
            let subscription = try await store.startManual(userID: userID, planID: plan.id, now: now, periodEnd: end, tx)
            // The comp starts a period: rollover, then the plan's monthly tokens, once for this period.
            _ = try await ledger.startPeriod(
                tx, userID: userID, periodKey: "period:\(subscription.currentPeriodStart.epochMilliseconds)", planID: plan.id,
                monthlyTokens: Int64(plan.monthlyTokens), maxRolloverTokens: Int64(plan.maxRollover))
            try await AuditLog.record(tx, at: now, actor: actor, action: "admin_subscription_comp", subject: userID, ip: ip, detail: plan.id)
        }
        return try await subscriptionRoutes.snapshot(userID: userID, logger: logger)
    }
}

extension ISO8601DateFormatter {
    /// Parses with or without fractional seconds.
    static func parse(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }
}
