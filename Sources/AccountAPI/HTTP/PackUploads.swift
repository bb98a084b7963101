import Entitlements
import Foundation
import Logging
import Media

/// An operator's sticker upload into a pack, from multipart parts (the API's and the console's): parts named `file`
/// (1 to 20), optional `name` (one file only) and `tags` (comma-separated). Every image is checked by content,
/// thumbnailed and stored first; then all rows are written in one transaction (all or none). Callers check that the pack
/// exists before they read the body.
struct PackUploads: Sendable {
    let content: StickerContentService
    let media: MediaServices

    func add(_ parts: [Multipart.Part], packID: String, actor: String, ip: String?, logger: Logger) async throws -> [Sticker] {
        let files = parts.filter { $0.name == "file" && !$0.body.isEmpty }
        guard (1...20).contains(files.count) else { throw Problem.validation("Send 1 to 20 images as multipart/form-data parts named 'file'.") }
        let tags = Self.tags(Multipart.text(parts, "tags"))
        var items: [StickerContentService.NewSticker] = []
        do {
            for file in files {
                let given = files.count == 1 ? Multipart.text(parts, "name") : nil
                let name = given.flatMap(Sticker.cleanName) ?? Multipart.fileStem(file).flatMap(Sticker.cleanName) ?? "sticker"
                items.append(.init(name: name, tags: tags, image: try await media.store(Data(file.body), owner: actor, logger: logger)))
            }
            return try await content.add(packID: packID, items: items, actor: actor, ip: ip, logger: logger)
        } catch {
            // All or none: the files stored for a batch that was not added go once nothing else uses them.
            await content.queueFileRemovals(items.flatMap { [$0.image.imageKey, $0.image.thumbnailKey] }, logger: logger)
            throw error
        }
    }

    static func tags(_ text: String?) -> [String] {
        (text ?? "").split(separator: ",").map { String($0.trimmingCharacters(in: .whitespaces).prefix(40)) }.filter { !$0.isEmpty }.prefix(20).map {
            $0
        }
    }
}
