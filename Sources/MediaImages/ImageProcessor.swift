import CVipsSupport
import Foundation
import Media

/// Image checks and thumbnails with libvips. Only the image worker (`account-service-images`) and tests link it: the
/// server runs it in that separate, short-lived process (``ImageWorker``), so the service itself never loads libvips and
/// its ~120 libraries, and a decoder bug cannot reach the service's memory.
public struct ImageProcessor: Sendable {
    public typealias Rules = ImageRules

    public let rules: Rules

    /// libvips starts on first use, not here: its start-up (thread pools, caches) would cost a server that never
    /// touches an image about 25 MiB of resident memory.
    public init(rules: Rules = Rules()) throws {
        self.rules = rules
    }

    private static let started: Result<Void, ImageProblem> = {
        as_vips_start() == 0 ? .success(()) : .failure(.undecodable(String(cString: as_vips_last_error())))
    }()

    static func start() throws { try started.get() }

    /// Checks the bytes against the rules: format by content, byte size, each side's size; the first frame is decoded in
    /// full (truncated data is refused) when its declared size is at most 4096 px a side.
    public func inspect(_ data: Data) throws -> ImageInfo {
        try Self.start()
        guard data.count <= rules.maxBytes else { throw ImageProblem.tooLarge(bytes: data.count, limit: rules.maxBytes) }
        guard let format = ImageFormat.sniff(data) else { throw ImageProblem.unsupportedFormat }
        var (width, height, pages, bands): (Int32, Int32, Int32, Int32) = (0, 0, 0, 0)
        let status = data.withUnsafeBytes { as_vips_inspect($0.baseAddress, $0.count, &width, &height, &pages, &bands) }
        guard status == 0 else { throw ImageProblem.undecodable(String(cString: as_vips_last_error())) }
        let (w, h) = (Int(width), Int(height))
        guard (rules.minSide...rules.maxSide).contains(w), (rules.minSide...rules.maxSide).contains(h) else {
            throw ImageProblem.dimensions(width: w, height: h, min: rules.minSide, max: rules.maxSide)
        }
        // w and h are at most maxSide here, so the product cannot overflow.
        guard pages >= 1, Int(pages) <= rules.maxPages, w * h * Int(pages) <= rules.maxPixels else {
            throw ImageProblem.frames(pages: Int(pages), width: w, height: h, maxPages: rules.maxPages, maxPixels: rules.maxPixels)
        }
        return ImageInfo(format: format, width: w, height: h, pages: Int(pages), hasAlpha: bands == 2 || bands == 4)
    }

    /// The image worker's whole job: checks the upload, then (a PNG) its pixels only, and the thumbnail. A PNG reaches
    /// the decoder with only the chunks that make its pixels (``PNGChunks/decodingOnly(_:)``).
    public func process(_ upload: Data) throws -> (info: ImageInfo, image: Data, thumbnail: Data) {
        guard upload.count <= rules.maxBytes else { throw ImageProblem.tooLarge(bytes: upload.count, limit: rules.maxBytes) }
        let isPNG = ImageFormat.sniff(upload) == .png
        let input = isPNG ? try PNGChunks.decodingOnly(upload) : upload
        let info = try inspect(input)
        return (info, isPNG ? try strippedPNG(input) : input, try thumbnail(input))
    }

    /// A PNG thumbnail that fits `rules.thumbnailSide` on both sides (aspect kept, first frame, alpha kept).
    public func thumbnail(_ data: Data) throws -> Data {
        try Self.start()
        return try Self.output { out, length in
            data.withUnsafeBytes { as_vips_thumbnail_png($0.baseAddress, $0.count, Int32(rules.thumbnailSide), &out, &length) }
        }
    }

    /// The PNG's pixels only: decoded and re-encoded losslessly at the highest compression, every metadata chunk (`tEXt`,
    /// `eXIf`, GPS …) and any bytes after `IEND` gone. Always the re-encoding, even when it is larger than the upload: the
    /// uploaded bytes themselves are never stored or served.
    public func strippedPNG(_ data: Data) throws -> Data {
        try Self.start()
        return try Self.output { out, length in
            data.withUnsafeBytes { as_vips_optimise_png($0.baseAddress, $0.count, &out, &length) }
        }
    }

    /// A test image: a `width`×`height` RGBA PNG (a gradient, transparent on its right half).
    public static func testPNG(width: Int, height: Int) throws -> Data { try testImage(width: width, height: height, format: .png) }

    /// One PNG chunk for tests that build hostile files: length, type, data, CRC-32.
    public static func pngChunk(_ type: String, _ data: [UInt8]) -> [UInt8] {
        let payload = Array(type.utf8) + data
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in payload {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        crc ^= 0xFFFF_FFFF
        func bigEndian(_ value: UInt32) -> [UInt8] { [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: value >> $0) } }
        return bigEndian(UInt32(data.count)) + payload + bigEndian(crc)
    }

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
