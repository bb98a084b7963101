import Entitlements
import Foundation

/// A subscription as `GET /api/user/subscription` and the operator endpoints show it.
struct SubscriptionJSON: Encodable, Sendable {
    let planId: String
    let status: String?
    let provider: String?
    let currentPeriodStart: String?
    let currentPeriodEnd: String?
    let willRenew: Bool
    let pendingPlanId: String?
    /// Received through Apple Family Sharing: the plan's features, its tokens only when the plan grants them to members.
    let familyShared: Bool
    /// Whether the plan's features apply now (false → the free plan applies).
    let isEntitled: Bool
    /// The plan whose features apply now.
    let plan: SubscriptionPlan

    init(_ view: SubscriptionView) {
        let subscription = view.subscription
        planId = subscription?.planID ?? view.plan.id
        status = subscription?.status.rawValue
        provider = subscription?.provider.rawValue
        currentPeriodStart = subscription.map { ISODate.string($0.currentPeriodStart) }
        currentPeriodEnd = subscription.map { ISODate.string($0.currentPeriodEnd) }
        willRenew = subscription?.willRenew ?? false
        pendingPlanId = subscription?.pendingPlanID
        familyShared = subscription?.familyShared ?? false
        isEntitled = view.isEntitled
        plan = view.plan
    }
}
