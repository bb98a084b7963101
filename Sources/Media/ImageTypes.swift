import Foundation

/// The image formats stickers accept, recognised by their first bytes (never by a client's content type).
public enum ImageFormat: String, Sendable, Codable, CaseIterable {
    case png, gif, webp

    /// The format the bytes start with, or nil. SVG is refused: a sanitiser that is safe against scripts, external
    /// references and entity tricks is a project of its own, and every app can draw PNG, GIF and WebP.
    public static func sniff(_ bytes: some Collection<UInt8>) -> ImageFormat? {
        let head = Array(bytes.prefix(12))
        if head.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return .png }
        if head.starts(with: Array("GIF87a".utf8)) || head.starts(with: Array("GIF89a".utf8)) { return .gif }
        if head.count == 12, head.starts(with: Array("RIFF".utf8)), Array(head[8..<12]) == Array("WEBP".utf8) { return .webp }
        return nil
    }
}

/// What an image is: format, one page's size, pages (animated GIF or WebP), alpha.
public struct ImageInfo: Sendable, Equatable, Codable {
    public let format: ImageFormat
    public let width: Int
    public let height: Int
    public let pages: Int
    public let hasAlpha: Bool
    public var isAnimated: Bool { pages > 1 }

    public init(format: ImageFormat, width: Int, height: Int, pages: Int, hasAlpha: Bool) {
        (self.format, self.width, self.height, self.pages, self.hasAlpha) = (format, width, height, pages, hasAlpha)
    }
}

/// Why an image was refused; each case is said to the uploader as it is.
public enum ImageProblem: Error, Equatable, Sendable, CustomStringConvertible, Codable {
    case unsupportedFormat
    case tooLarge(bytes: Int, limit: Int)
    case dimensions(width: Int, height: Int, min: Int, max: Int)
    /// An animation with more frames, or more pixels over all its frames, than a device should decode for a sticker.
    case frames(pages: Int, width: Int, height: Int, maxPages: Int, maxPixels: Int)
    case undecodable(String)

    public var description: String {
        switch self {
        case .unsupportedFormat: "The file is not a PNG, GIF or WebP image (SVG is not accepted)."
        case .tooLarge(let bytes, let limit): "The image is \(bytes) bytes; at most \(limit) are accepted."
        case .dimensions(let w, let h, let min, let max): "The image is \(w)×\(h) px; each side must be \(min) to \(max) px."
        case .frames(let pages, let w, let h, let maxPages, let maxPixels):
            "The animation has \(pages) frames of \(w)×\(h) px; at most \(maxPages) frames and \(maxPixels / 1_000_000) million pixels over all frames are accepted."
        case .undecodable(let why): "The image could not be read (\(why.prefix(120)))."
        }
    }
}

/// What a sticker image must be: at most `maxBytes`, each side `minSide` to `maxSide`, at most `maxPages` frames and
/// `maxPixels` over all frames (a 500 KB GIF can hold thousands of frames that a phone would decode into gigabytes);
/// thumbnails fit `thumbnailSide`.
public struct ImageRules: Sendable, Codable, Equatable {
    public var maxBytes = 500 * 1024
    public var minSide = 200
    public var maxSide = 1024
    public var maxPages = 250
    /// 64 million pixels: 256 MiB decoded as RGBA (e.g. 64 frames of 1024×1024, or 250 of 512×512).
    public var maxPixels = 64_000_000
    public var thumbnailSide = 100
    /// The worker's private memory (`RLIMIT_DATA`, set before it reads the image): a decode that would take more fails,
    /// and the upload is refused as unprocessable (400). Images at every limit above take under 128 MiB.
    public var memoryBytesMax = 512 * 1024 * 1024
    public init() {}
}
