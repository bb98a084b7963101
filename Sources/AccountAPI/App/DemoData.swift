import Auth
import Entitlements
import Foundation
import Logging
import Media

/// What `account-service demo` loads: a few sticker packs (one free, one bought with tokens, one included in the Pro and
/// Max plans) with three stickers each, and an operator account, so the tour in the README has something to show. Running it again changes nothing.
public enum DemoData {
    /// The packs, as an operator would post them (only `id`, `name` and `category` are required).
    static let packs = """
        [
          {"id": "everyday-emoji", "name": "Everyday Emoji", "category": "emoji", "description": "Free for everyone."},
          {"id": "cozy-animals", "name": "Cozy Animals", "category": "custom", "tokenPrice": 2,
           "description": "Bought once with tokens; stays unlocked after a downgrade."},
          {"id": "space-trip", "name": "Space Trip", "category": "seasonal",
           "includedInPlans": ["pro_monthly", "pro_yearly", "max_monthly", "max_yearly", "business_monthly", "business_yearly"],
           "description": "Included in Pro and above while the plan is current."}
        ]
        """

    public static let operatorEmail = "ops@example.com"

    /// What a run did.
    public struct Report: Sendable {
        public let packsCreated: [String]
        public let packsKept: [String]
        /// The operator's password when this run created the account (shown once); nil when it existed.
        public let operatorPassword: String?
    }

    public static func load(_ dependencies: Dependencies, logger: Logger) async throws -> Report {
        let existing = Set(try await dependencies.stickers.catalog(logger: logger).map(\.id))
        var created: [String] = []
        var kept: [String] = []
        for pack in try JSONDecoder().decode([StickerPack].self, from: Data(packs.utf8)) {
            if existing.contains(pack.id) {
                kept.append(pack.id)
                continue
            }
            try await dependencies.stickers.save(pack, create: true, actor: "cli:demo", ip: nil, logger: logger)
            try await addStickers(to: pack.id, dependencies, logger: logger)
            created.append(pack.id)
        }
        let password = Self.randomPassword()
        do {
            _ = try await dependencies.auth.createAdmin(email: operatorEmail, password: password, name: "Demo Operator", logger: logger)
            return Report(packsCreated: created, packsKept: kept, operatorPassword: password)
        } catch AuthError.conflict {
            return Report(packsCreated: created, packsKept: kept, operatorPassword: nil)
        }
    }

    /// Three generated images per new pack (the last one an animated GIF), stored and thumbnailed like an upload.
    static func addStickers(to packID: String, _ dependencies: Dependencies, logger: Logger) async throws {
        let worker = dependencies.media.images
        let images: [(String, Data)] = [
            ("Sunrise", try worker.sample(width: 320, height: 320, format: .png)),
            ("Wide View", try worker.sample(width: 480, height: 240, format: .png)),
            ("Blink", try worker.sample(width: 240, height: 240, pages: 3, format: .gif)),
        ]
        var items: [StickerContentService.NewSticker] = []
        for (name, data) in images {
            items.append(.init(name: name, tags: ["demo"], image: try await dependencies.media.store(data, owner: "cli:demo", logger: logger)))
        }
        _ = try await dependencies.stickerContent.add(packID: packID, items: items, actor: "cli:demo", ip: nil, logger: logger)
    }

    /// 20 characters from a 56-letter alphabet without look-alikes (about 116 bits).
    static func randomPassword() -> String {
        let alphabet = Array("abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789")
        var generator = SystemRandomNumberGenerator()
        return String((0..<20).map { _ in alphabet[Int.random(in: 0..<alphabet.count, using: &generator)] })
    }
}
