import Clock
import Entitlements
import Foundation
import HTTPTypes
import Logging
import Media
import NIOPosix
import Storage
import Traces

/// The media side: image checks and thumbnails (libvips), the blob store (`DATA_DIR/media`), signed URLs.
struct MediaServices: UploadedImages {
    /// Bytes one multipart request may carry (20 images of 500 KB and their headers).
    static let maxUploadBody = 12 * 1024 * 1024

    let images: ImageWorker
    let blobs: any BlobStore
    /// Images in work per uploader (a user id, or the operator's actor id): one at a time each.
    let jobs = ImageJobs()
    let signer: URLSigner
    /// Signed URLs and their windows are on the service's clock.
    let clock: any TimeSource

    /// Checks, thumbnails and stores an image: the image worker (a separate process) does the image work, off the
    /// event loops; the blob store keeps both files by content.
    func store(_ data: Data, owner: String, logger: Logger) async throws -> StoredImage {
        guard await jobs.begin(owner) else {
            throw Problem(
                .tooManyRequests, code: "rate_limited", detail: "Images of yours are still being processed; send the next when one is done."
            )
            .retryAfter(seconds: 1)
        }
        let images = images
        let outcome: Result<ImageWorker.Answer, any Error>
        do {
            outcome = .success(
                try await Traces.span("image.process", attributes: ["image.bytes": "\(data.count)"]) {
                    try await NIOThreadPool.singleton.runIfActive { try images.process(data) }
                })
        } catch { outcome = .failure(error) }
        await jobs.end(owner)
        let answer: ImageWorker.Answer
        do {
            answer = try outcome.get()
        } catch ImageWorker.Failure.missing(let path) {
            logger.error("image worker missing", metadata: ["path": "\(path)"])
            throw Problem(.serviceUnavailable, code: "unavailable", detail: "Images cannot be processed right now.")
        } catch let failure as ImageWorker.Failure {
            // The worker crashed or ran out of time on this image: the image's fault, said without the worker's output.
            logger.warning("image worker failed", metadata: ["error": .error(failure)])
            throw Problem.validation("The image could not be processed.")
        }
        guard case .processed(let info, let optimised, let thumbnail) = answer else {
            if case .refused(let problem) = answer { throw Problem.validation(problem.description) }
            throw Problem.validation("The image could not be read.")
        }
        // Each uploader's files are their own (``BlobStore/key(for:fileExtension:namespace:)``).
        let namespace = signer.namespace(for: owner)
        let imageKey = try await blobs.put(optimised, fileExtension: info.format.rawValue, namespace: namespace)
        let thumbnailKey = try await blobs.put(thumbnail, fileExtension: "png", namespace: namespace)
        return StoredImage(
            imageKey: imageKey, thumbnailKey: thumbnailKey, fileType: info.format.rawValue, width: info.width, height: info.height,
            isAnimated: info.isAnimated, bytes: optimised.count)
    }

    /// A file nothing uses any more; one that is already gone is no failure.
    func remove(_ key: String, unlessWrittenWithin grace: TimeInterval) async throws -> Bool {
        try await blobs.delete(key, unlessWrittenWithin: grace)
    }

    func keep(_ key: String) async throws { try await blobs.restore(key) }
}
