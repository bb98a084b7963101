import CVipsSupport
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
public struct ImageInfo: Sendable, Equatable {
    public let format: ImageFormat
    public let width: Int
    public let height: Int
    public let pages: Int
    public let hasAlpha: Bool
    public var isAnimated: Bool { pages > 1 }
}

/// Why an image was refused; each case is said to the uploader as it is.
public enum ImageProblem: Error, Equatable, Sendable, CustomStringConvertible {
    case unsupportedFormat
    case tooLarge(bytes: Int, limit: Int)
    case dimensions(width: Int, height: Int, min: Int, max: Int)
    case undecodable(String)

    public var description: String {
        switch self {
        case .unsupportedFormat: "The file is not a PNG, GIF or WebP image (SVG is not accepted)."
        case .tooLarge(let bytes, let limit): "The image is \(bytes) bytes; at most \(limit) are accepted."
        case .dimensions(let w, let h, let min, let max): "The image is \(w)×\(h) px; each side must be \(min) to \(max) px."
        case .undecodable(let why): "The image could not be read (\(why.prefix(120)))."
        }
    }
}

/// Image checks and thumbnails with libvips, off the caller's thread.
public struct ImageProcessor: Sendable {
    public struct Rules: Sendable {
        public var maxBytes = 500 * 1024
        public var minSide = 200
        public var maxSide = 1024
        public var thumbnailSide = 100
        public init() {}
    }

    public let rules: Rules

    public init(rules: Rules = Rules()) throws {
        self.rules = rules
        try Self.start()
    }

    private static let started: Result<Void, ImageProblem> = {
        as_vips_start() == 0 ? .success(()) : .failure(.undecodable(String(cString: as_vips_last_error())))
    }()

    static func start() throws { try started.get() }

    /// Checks the bytes against the rules: format by content, byte size, each side's size; the first frame is decoded in
    /// full (truncated data is refused) when its declared size is at most 4096 px a side.
    public func inspect(_ data: Data) throws -> ImageInfo {
        guard data.count <= rules.maxBytes else { throw ImageProblem.tooLarge(bytes: data.count, limit: rules.maxBytes) }
        guard let format = ImageFormat.sniff(data) else { throw ImageProblem.unsupportedFormat }
        var (width, height, pages, bands): (Int32, Int32, Int32, Int32) = (0, 0, 0, 0)
        let status = data.withUnsafeBytes { as_vips_inspect($0.baseAddress, $0.count, &width, &height, &pages, &bands) }
        guard status == 0 else { throw ImageProblem.undecodable(String(cString: as_vips_last_error())) }
        let (w, h) = (Int(width), Int(height))
        guard (rules.minSide...rules.maxSide).contains(w), (rules.minSide...rules.maxSide).contains(h) else {
            throw ImageProblem.dimensions(width: w, height: h, min: rules.minSide, max: rules.maxSide)
        }
        return ImageInfo(format: format, width: w, height: h, pages: Int(pages), hasAlpha: bands == 2 || bands == 4)
    }

    /// A PNG thumbnail that fits `rules.thumbnailSide` on both sides (aspect kept, first frame, alpha kept).
    public func thumbnail(_ data: Data) throws -> Data {
        try Self.output { out, length in
            data.withUnsafeBytes { as_vips_thumbnail_png($0.baseAddress, $0.count, Int32(rules.thumbnailSide), &out, &length) }
        }
    }

    /// A PNG re-encoded losslessly at the highest compression, metadata stripped; the original when that is not smaller.
    public func optimisedPNG(_ data: Data) throws -> Data {
        let smaller = try Self.output { out, length in
            data.withUnsafeBytes { as_vips_optimise_png($0.baseAddress, $0.count, &out, &length) }
        }
        return smaller.count < data.count ? smaller : data
    }

    /// A test image: a `width`×`height` RGBA PNG (a gradient, transparent on its right half).
    public static func testPNG(width: Int, height: Int) throws -> Data { try testImage(width: width, height: height, format: .png) }

    /// The same gradient in `format`, with `pages` frames (an animation when more than one).
    public static func testImage(width: Int, height: Int, pages: Int = 1, format: ImageFormat) throws -> Data {
        try start()
        return try output { out, length in as_vips_test_image(Int32(width), Int32(height), Int32(pages), ".\(format.rawValue)", &out, &length) }
    }

    static func output(_ body: (inout UnsafeMutableRawPointer?, inout Int) -> Int32) throws -> Data {
        var out: UnsafeMutableRawPointer?
        var length = 0
        guard body(&out, &length) == 0, let out else { throw ImageProblem.undecodable(String(cString: as_vips_last_error())) }
        defer { as_vips_free(out) }
        return Data(bytes: out, count: length)
    }
}
