import Auth
import Foundation
import HTTPTypes
import Hummingbird

/// A profile as apps see it: the seed's `FamilyProfile` plus `isLocked` (beyond the plan's limit).
struct ProfileJSON: Encodable, Sendable {
    let id: String
    let name: String
    let avatar: String?
    let isDefault: Bool
    let canMakePurchases: Bool
    let canUseCustomContentTypes: Bool
    let hasPin: Bool
    let isLocked: Bool

    init(_ profile: FamilyProfile, isLocked: Bool = false) {
        id = profile.id
        name = profile.name
        avatar = profile.avatar
        isDefault = profile.isDefault
        canMakePurchases = profile.canMakePurchases
        canUseCustomContentTypes = profile.canUseCustomContentTypes
        hasPin = profile.hasPin
        self.isLocked = isLocked
    }

    init(_ view: ProfileView) { self.init(view.profile, isLocked: view.isLocked) }
}

/// The seed's `CreateProfileRequest`, also used for updates, plus `removePin` and `currentPassword`.
struct ProfileRequest: Decodable {
    let name: String
    let avatar: String?
    let pin: String?
    let removePin: Bool?
    let canMakePurchases: Bool?
    let canUseCustomContentTypes: Bool?
    let currentPassword: String?

    var input: ProfileInput {
        ProfileInput(
            name: name, avatar: avatar, pin: pin, removePin: removePin ?? false, canMakePurchases: canMakePurchases ?? false,
            canUseCustomContentTypes: canUseCustomContentTypes ?? false)
    }
}

/// Family profiles for the signed-in account (seed 004 paths).
struct ProfileRoutes: Sendable {
    let profiles: ProfileService
    let authenticator: Authenticator

    struct SelectRequest: Decodable { let profileId: String; let pin: String? }
    struct SelectResponse: Encodable, Sendable { let success: Bool; let message: String; let selectedProfile: ProfileJSON }

    func register(on router: Router<AppRequestContext>) {
        router.get("/api/profiles/available") { request, context in
            let session = try await authenticator.session(request, context)
            return JSONResponse(try await profiles.available(userID: session.user.id, logger: context.logger).map(ProfileJSON.init))
        }
        router.post("/api/profiles/select") { request, context in
            let session = try await authenticator.session(request, context)
            var request = request
            let body = try await request.decodeJSON(SelectRequest.self, context: context)
            let profile = try await profiles.select(session, profileID: body.profileId, pin: body.pin, logger: context.logger)
            return JSONResponse(SelectResponse(success: true, message: "Profile selected.", selectedProfile: ProfileJSON(profile)))
        }
        router.post("/api/family-profiles") { request, context in
            let session = try await authenticator.session(request, context)
            var request = request
            let body = try await request.decodeJSON(ProfileRequest.self, context: context)
            let profile = try await profiles.create(
                userID: session.user.id, input: body.input, by: .owner(session, currentPassword: body.currentPassword), logger: context.logger)
            return JSONResponse(ProfileJSON(profile), status: .created)
        }
        router.put("/api/family-profiles/:id") { request, context in
            let session = try await authenticator.session(request, context)
            var request = request
            let body = try await request.decodeJSON(ProfileRequest.self, context: context)
            let profile = try await profiles.update(
                userID: session.user.id, profileID: try context.parameters.require("id"), input: body.input,
                by: .owner(session, currentPassword: body.currentPassword), logger: context.logger)
            return JSONResponse(ProfileJSON(profile))
        }
        router.delete("/api/family-profiles/:id") { request, context in
            let session = try await authenticator.session(request, context)
            try await profiles.delete(
                userID: session.user.id, profileID: try context.parameters.require("id"), by: .owner(session, currentPassword: nil), logger: context.logger)
            return Response(status: .noContent)
        }
    }
}
