import Auth
import Entitlements
import Foundation
import Hummingbird
import Storage

/// Operators manage the sticker-pack catalog. Deleting deactivates (unlocks are kept). Audited.
struct AdminPackRoutes: Sendable {
    let database: any Database
    let packs: StickerPackStore
    let clock: any TimeSource
    let authenticator: Authenticator

    struct PacksResponse: Encodable, Sendable { let packs: [StickerPack] }

    func register(on router: Router<AppRequestContext>) {
        router.get("/api/admin/stickers/packs") { request, context in
            _ = try await authenticator.requireOperator(request, context)
            return JSONResponse(PacksResponse(packs: try await database.withConnection(logger: context.logger) { try await packs.all($0, activeOnly: false) }))
        }
        router.post("/api/admin/stickers/packs") { request, context in
            let actor = try await authenticator.requireOperator(request, context)
            var request = request
            let pack = try await request.decodeJSON(StickerPack.self, context: context)
            try await save(pack, create: true, actor: actor, ip: context.clientIP, context: context)
            return JSONResponse(pack, status: .created)
        }
        router.put("/api/admin/stickers/packs/:id") { request, context in
            let actor = try await authenticator.requireOperator(request, context)
            var request = request
            var pack = try await request.decodeJSON(StickerPack.self, context: context)
            let id = try context.parameters.require("id")
            guard pack.id == id else { throw Problem.validation("The body's id must match the path.") }
            pack.id = id
            try await save(pack, create: false, actor: actor, ip: context.clientIP, context: context)
            return JSONResponse(pack)
        }
        router.delete("/api/admin/stickers/packs/:id") { request, context in
            let actor = try await authenticator.requireOperator(request, context)
            let id = try context.parameters.require("id")
            let found = try await database.transaction(logger: context.logger) { tx in
                let found = try await packs.deactivate(tx, id: id)
                if found { try await AuditLog.record(tx, at: clock.now(), actor: actor, action: "admin_pack_deactivated", subject: nil, ip: context.clientIP, detail: id) }
                return found
            }
            guard found else { throw Problem.notFound("No such sticker pack.") }
            return Response(status: .noContent)
        }
    }

    func save(_ pack: StickerPack, create: Bool, actor: String, ip: String, context: AppRequestContext) async throws {
        do {
            let saved = try await database.transaction(logger: context.logger) { tx in
                let saved = try await packs.save(tx, pack, create: create)
                if saved {
                    try await AuditLog.record(
                        tx, at: clock.now(), actor: actor, action: create ? "admin_pack_created" : "admin_pack_updated", subject: nil, ip: ip, detail: pack.id)
                }
                return saved
            }
            guard saved else { throw Problem(.conflict, code: "validation_failed", detail: "A pack with id '\(pack.id)' exists; use PUT to change it.") }
        } catch let error as EntitlementError {
            throw error.problem
        }
    }
}
