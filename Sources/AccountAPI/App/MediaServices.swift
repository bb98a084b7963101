import Entitlements
import Foundation
import HTTPTypes
import Media
import NIOPosix

/// The media side: image checks and thumbnails (libvips), the blob store (`DATA_DIR/media`), signed URLs.
struct MediaServices: Sendable {
    /// Bytes one multipart request may carry (20 images of 500 KB and their headers).
    static let maxUploadBody = 12 * 1024 * 1024

    let images: ImageWorker
    let blobs: any BlobStore
    let signer: URLSigner

    /// Checks, thumbnails and stores an image: the image worker (a separate process) does the image work, off the
    /// event loops; the blob store keeps both files by content.
    func store(_ data: Data) async throws -> StoredImage {
        let images = images
        let answer: ImageWorker.Answer
        do {
            answer = try await NIOThreadPool.singleton.runIfActive { try images.process(data) }
        } catch let failure as ImageWorker.Failure {
            throw Problem(.serviceUnavailable, code: "unavailable", detail: "Images cannot be processed right now (\(failure)).")
        }
        guard case .processed(let info, let optimised, let thumbnail) = answer else {
            if case .refused(let problem) = answer { throw Problem.validation(problem.description) }
            throw Problem.validation("The image could not be read.")
        }
        let imageKey = try await blobs.put(optimised, fileExtension: info.format.rawValue)
        let thumbnailKey = try await blobs.put(thumbnail, fileExtension: "png")
        return StoredImage(
            imageKey: imageKey, thumbnailKey: thumbnailKey, fileType: info.format.rawValue, width: info.width, height: info.height,
            isAnimated: info.isAnimated, bytes: optimised.count)
    }
}

extension MediaServices {
    /// The `StickerJSON` of a sticker: its files' URLs signed when `signed`, public otherwise.
    func json(_ sticker: Sticker, signed: Bool, now: Date = Date()) -> StickerJSON {
        let url = { (key: String) in signed ? signer.signedURL(key, now: now) : signer.publicURL(key) }
        return StickerJSON(
            id: sticker.id, packId: sticker.packID, name: sticker.name, imageUrl: url(sticker.file.imageKey),
            thumbnailUrl: url(sticker.file.thumbnailKey),
            width: sticker.file.width, height: sticker.file.height, fileType: sticker.file.fileType, tags: sticker.tags,
            isAnimated: sticker.file.isAnimated, sortOrder: sticker.sortOrder, usageCount: sticker.usageCount)
    }

    func json(_ list: StickerList) -> [StickerJSON] {
        let now = Date()
        return list.stickers.map { json($0, signed: list.signed.contains($0.id), now: now) }
    }
}

/// A sticker as apps get it (seed 000's `CustomSticker`, camelCase).
struct StickerJSON: Encodable, Sendable {
    let id: String; let packId: String; let name: String; let imageUrl: String; let thumbnailUrl: String; let width: Int; let height: Int
    let fileType: String; let tags: [String]; let isAnimated: Bool; let sortOrder: Int; let usageCount: Int
}
