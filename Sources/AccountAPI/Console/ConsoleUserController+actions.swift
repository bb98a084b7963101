import Auth
import Entitlements
import Foundation
import Hummingbird
import Ledger

/// The actions of the user page. Each goes through the service function the matching `/api/admin/…` endpoint uses and
/// answers with a page saying what happened and the audit line it wrote. Grants and debits carry the idempotency key the
/// page was rendered with, so a form sent twice (a double click, a reload) takes effect once.
extension ConsoleUserController {
    func idempotency(
        _ form: ConsoleForm, _ op: ConsoleOperator, fields: some Encodable, endpoint: String, userID: String
    ) throws -> IdempotentRequest {
        let key = try form.required("idempotencyKey", label: "The form's idempotency key")
        guard key.utf8.count <= 255 else { throw Problem.validation("The form's idempotency key is too long; reload the page.") }
        return IdempotentRequest(
            caller: op.actor, key: "console:" + key, fields: canonicalFields(fields, extra: ["endpoint": endpoint, "userId": userID]))
    }

    func bucket(_ form: ConsoleForm) throws -> Bucket? {
        guard let raw = form.text("bucket") else { return nil }
        guard let bucket = Bucket(rawValue: raw) else { throw Problem.validation("Bucket must be bonus, subscription or purchased.") }
        return bucket
    }

    func ledgerLines(_ answer: IdempotentResult<LedgerResult>, verb: String) throws -> [String] {
        switch answer.outcome {
        case .succeeded(let result):
            let b = result.balances
            return [
                "\(verb) \(result.amount) tokens (operation \(result.operationId))\(answer.replayed ? " — this form was already sent; nothing changed again" : "").",
                "Balance now: bonus \(b.bonusTokens), subscription \(b.subscriptionTokens), purchased \(b.purchasedTokens), held \(b.heldTokens).",
            ]
        case .failed(let error): throw error
        case .sentBefore: return ["This form was already sent before; nothing changed again."]
        }
    }

    @Sendable func grant(_ request: Request, context: AppRequestContext) async throws -> Response {
        let (op, userID, form) = try await action(request, context)
        let amount = try form.number("amount", label: "Amount", in: 1...LedgerLimits.amountTokensMax)
        let bucket = try bucket(form) ?? .bonus
        let reason = form.text("reason") ?? "admin_grant"
        let fields = LedgerGrantRequest(userId: userID, amount: amount, bucket: bucket, reason: reason, expiresAt: nil, metadata: nil)
        let answer = try await ledger.grant(
            try idempotency(form, op, fields: fields, endpoint: "admin-grants", userID: userID), userID: userID, amountTokens: amount, bucket: bucket,
            reason: reason,
            expiresAt: nil, metadata: nil, by: .operatorActor(op.actor, ip: context.clientIP), logger: context.logger)
        return try await done("Tokens granted", try ledgerLines(answer, verb: "Granted"), op, userID: userID, context: context)
    }

    /// What a console debit's idempotency record compares (console keys are their own key space).
    struct DebitFields: Encodable { let amount: Int64; let bucket: Bucket?; let reason: String }

    @Sendable func debit(_ request: Request, context: AppRequestContext) async throws -> Response {
        let (op, userID, form) = try await action(request, context)
        let amount = try form.number("amount", label: "Amount", in: 1...LedgerLimits.amountTokensMax)
        let fields = AdminLedgerController.DebitRequest(
            amount: amount, bucket: try bucket(form), reason: try form.required("reason", label: "Reason"))
        let answer = try await ledger.debit(
            try idempotency(form, op, fields: fields, endpoint: "admin-debits", userID: userID), userID: userID, amountTokens: amount,
            bucket: fields.bucket,
            note: fields.reason, actor: op.actor, ip: context.clientIP, logger: context.logger)
        return try await done("Tokens debited", try ledgerLines(answer, verb: "Debited"), op, userID: userID, context: context)
    }

    @Sendable func reverse(_ request: Request, context: AppRequestContext) async throws -> Response {
        let (op, userID, form) = try await action(request, context)
        // The entry must be this user's: checked inside the reversal's transaction (another user's entry is not found).
        let reversal = try await ledger.reverse(
            transferID: try form.required("transfer", label: "The entry"), ofUser: userID, note: form.text("reason") ?? "reversed_in_console",
            actor: op.actor, ip: context.clientIP, logger: context.logger)
        return try await done(
            "Entry reversed", ["Reversed \(reversal.amountTokens) tokens of \(reversal.reversedReason) (operation \(reversal.operationID))."], op,
            userID: userID, context: context)
    }

    @Sendable func comp(_ request: Request, context: AppRequestContext) async throws -> Response {
        let (op, userID, form) = try await action(request, context)
        let until = try form.text("until").map { text -> Date in
            // The end of that day (UTC), so "until the 31st" includes the 31st.
            guard text.utf8.count == 10, let date = ISODate.parse(text + "T23:59:59Z") else {
                throw Problem.validation("Until must be a date (YYYY-MM-DD).")
            }
            return date
        }
        let view = try await subscriptions.comp(
            userID: userID, planID: try form.required("plan", label: "Plan"), periodEnd: until, actor: op.actor, ip: context.clientIP,
            logger: context.logger)
        let line = Self.subscriptionLine(view)
        return try await done(
            "Plan comped", ["\(line.planName) (\(line.state)) until \(line.periodEnd ?? "further notice")."], op, userID: userID, context: context)
    }

    @Sendable func endSubscription(_ request: Request, context: AppRequestContext) async throws -> Response {
        let (op, userID, _) = try await action(request, context)
        guard try await subscriptions.end(userID: userID, actor: op.actor, ip: context.clientIP, logger: context.logger) else {
            throw Problem.notFound("This user has no subscription.")
        }
        return try await done(
            "Subscription ended", ["The subscription has ended; the user is on the free plan."], op, userID: userID, context: context)
    }
}

/// Sessions, profiles, second factor and erasure.
extension ConsoleUserController {
    /// One session (`session` in the form) or, without it, all of them.
    @Sendable func revokeSessions(_ request: Request, context: AppRequestContext) async throws -> Response {
        let (op, userID, form) = try await action(request, context)
        let one = form.text("session")
        guard try await auth.revokeSessions(ofUser: userID, sessionID: one, actor: op.actor, ip: context.clientIP, logger: context.logger) else {
            throw Problem.notFound("This user has no live session by that id.")
        }
        let line = one.map { "Session \($0) is revoked." } ?? "Every session of this user is revoked: they are signed out everywhere."
        return try await done("Signed out", [line], op, userID: userID, context: context)
    }

    @Sendable func resetPIN(_ request: Request, context: AppRequestContext) async throws -> Response {
        let (op, userID, _) = try await action(request, context)
        let profile = try await profiles.resetPIN(
            userID: userID, profileID: try context.pathParameter("id"), by: .operatorActor(op.actor, ip: context.clientIP), logger: context.logger)
        return try await done(
            "PIN reset", ["Profile \(profile.name) has no PIN now; the owner can set a new one in the app."], op, userID: userID, context: context)
    }

    /// Renames a profile, keeping every other setting as it is.
    @Sendable func renameProfile(_ request: Request, context: AppRequestContext) async throws -> Response {
        let (op, userID, form) = try await action(request, context)
        let profileID = try context.pathParameter("id")
        guard let current = try await profiles.available(userID: userID, logger: context.logger).first(where: { $0.profile.id == profileID }) else {
            throw Problem.notFound("This user has no profile \(profileID.prefix(64)).")
        }
        let p = current.profile
        let input = ProfileInput(
            name: try form.required("name", label: "Name"), avatar: p.avatar, pin: nil, removePin: false, canMakePurchases: p.canMakePurchases,
            canUseCustomContentTypes: p.canUseCustomContentTypes)
        let renamed = try await profiles.update(
            userID: userID, profileID: profileID, input: input, by: .operatorActor(op.actor, ip: context.clientIP), logger: context.logger)
        return try await done("Profile renamed", ["\(p.name) is now \(renamed.name)."], op, userID: userID, context: context)
    }

    @Sendable func deleteProfile(_ request: Request, context: AppRequestContext) async throws -> Response {
        let (op, userID, _) = try await action(request, context)
        try await profiles.delete(
            userID: userID, profileID: try context.pathParameter("id"), by: .operatorActor(op.actor, ip: context.clientIP), logger: context.logger)
        return try await done(
            "Profile deleted", ["The profile is deleted; its pending requests are cancelled."], op, userID: userID, context: context)
    }

    /// Clearing someone's second factor weakens their account for good: it needs a recent sign-in or the password.
    @Sendable func clearMFA(_ request: Request, context: AppRequestContext) async throws -> Response {
        let (op, userID, _, authorise) = try await action(request, context, lasting: true)
        guard try await auth.resetTOTP(userID: userID, actor: op.actor, ip: context.clientIP, authorise: authorise, logger: context.logger) else {
            throw Problem.notFound("This user has no two-factor codes.")
        }
        return try await done(
            "Two-factor codes cleared", ["The next sign-in needs only the password; the user was told by mail."], op, userID: userID,
            context: context)
    }

    @Sendable func erase(_ request: Request, context: AppRequestContext) async throws -> Response {
        let (op, userID, form) = try await action(request, context)
        try await auth.eraseByOperator(
            userID: userID, confirmation: form["confirm"] ?? "", actor: op.actor, ip: context.clientIP, logger: context.logger)
        return try await done(
            "Account erased", ["Personal data, sessions and profiles are gone; the tokens are forfeited. The id stays, anonymous."], op,
            userID: userID, context: context)
    }
}
