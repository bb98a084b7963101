import Entitlements
import Foundation
import Media
import NIOPosix

/// The media side: image checks and thumbnails (libvips), the blob store (`DATA_DIR/media`), signed URLs.
struct MediaServices: Sendable {
    let images: ImageProcessor
    let blobs: any BlobStore
    let signer: URLSigner

    /// Checks, thumbnails and stores an image off the event loops; the blob store keeps both files by content.
    func store(_ data: Data) async throws -> StoredImage {
        let images = images
        let (info, optimised, thumbnail) = try await NIOThreadPool.singleton.runIfActive {
            do {
                let info = try images.inspect(data)
                let optimised = info.format == .png ? try images.optimisedPNG(data) : data
                return (info, optimised, try images.thumbnail(data))
            } catch let problem as ImageProblem {
                throw Problem.validation(problem.description)
            }
        }
        let imageKey = try await blobs.put(optimised, fileExtension: info.format.rawValue)
        let thumbnailKey = try await blobs.put(thumbnail, fileExtension: "png")
        return StoredImage(
            imageKey: imageKey, thumbnailKey: thumbnailKey, fileType: info.format.rawValue, width: info.width, height: info.height,
            isAnimated: info.isAnimated)
    }
}
