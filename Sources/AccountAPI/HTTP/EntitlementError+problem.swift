import Auth
import Entitlements
import Foundation
import HTTPTypes

extension EntitlementError {
    var problem: Problem {
        switch self {
        case .packNotFound: Problem.notFound("No such sticker pack.")
        case .packExists(let id):
            Problem(.conflict, code: "pack_exists", detail: "A pack with id '\(id)' exists; change it with PUT /api/admin/stickers/packs/\(id).")
        case .alreadyUnlocked(let detail): Problem(.conflict, code: "already_unlocked", detail: detail)
        case .purchaseNotAllowed:
            Problem(.forbidden, code: "purchase_not_allowed", detail: "This profile cannot make purchases; switch to a profile that can.")
        case .invalid(let problems): Problem.validation(problems.joined(separator: "; "))
        case .packLocked:
            Problem(.forbidden, code: "pack_locked", detail: "This premium pack is locked: unlock it with tokens or a plan that includes it.")
        case .ownStickersNotAllowed(let change):
            Problem.forbidden(change ? "This profile cannot change the account's own stickers." : "This profile cannot add its own stickers.")
        case .stickerNotFound: Problem.notFound("No such sticker (or not one you can use).")
        case .uploadQuotaExceeded(let stickers, let bytes):
            Problem(
                .tooManyRequests, code: "upload_quota_exceeded",
                detail:
                    "Your sticker uploads are at the limit (\(stickers) stickers, \(ByteCountFormatter.string(fromByteCount: Int64(bytes), countStyle: .binary))); delete some to upload more."
            )
        case .refused(let refusal, let detail): Problem(.forbidden, code: refusal.rawValue, detail: detail)
        case .profileNotFound: Problem.notFound("The account has no profile with this id.")
        case .profileSelectionRequired: AuthError.profileSelectionRequired.problem
        case .purchaseRequestNotFound: Problem.notFound("The account has no purchase request with this id.")
        case .purchaseRequestResolved(let status):
            Problem(.conflict, code: "purchase_request_resolved", detail: "This purchase request is already \(status); it resolves once.")
                .with("status", .string(status))
        case .stickerExists(let id):
            Problem(.conflict, code: "sticker_exists", detail: "A sticker with id '\(id)' exists in this pack; give it another name.")
        }
    }
}
