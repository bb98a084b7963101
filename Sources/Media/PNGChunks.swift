import Foundation

/// A PNG's chunks as the decoder should see them: only those that make its pixels, their colour and transparency. Text
/// chunks (`tEXt`, `zTXt`, `iTXt`), Exif, animation and private chunks are left out before any decoder runs: a 410 KB
/// upload carrying forty compressed 10 MB text chunks made the image worker inflate each of them on every one of its
/// three decodes (2.8 GiB and 15 s of a core). An ICC profile (`iCCP`, compressed) is kept up to ``iccBytesMax``
/// compressed bytes (a phone's Display P3 profile is about 0.5 KB), dropped beyond that. Anything after `IEND` goes.
/// Chunks are copied as they are (their CRCs are the decoder's to check); a file that ends inside a chunk, or has no
/// `IEND`, is refused.
public enum PNGChunks {
    static let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
    /// The chunks kept: image header, palette, data and end; transparency; colour (gamma, chromaticities, sRGB, profile,
    /// significant bits); background; physical pixel size.
    static let kept: Set<String> = ["IHDR", "PLTE", "IDAT", "IEND", "tRNS", "gAMA", "cHRM", "sRGB", "iCCP", "sBIT", "bKGD", "pHYs"]
    public static let iccBytesMax = 16 * 1024

    /// The PNG with only the chunks kept, or `undecodable` for bytes that are not a whole PNG.
    public static func decodingOnly(_ data: Data) throws(ImageProblem) -> Data {
        let bytes = [UInt8](data)
        guard bytes.count >= signature.count, Array(bytes[0..<signature.count]) == signature else {
            throw .undecodable("not a PNG file")
        }
        var out = Data(signature)
        var at = signature.count
        while true {
            // Length (4), type (4), data (length), CRC (4); `at` and `length` are bounded by the array, so no sum overflows.
            guard bytes.count - at >= 12 else { throw .undecodable("the PNG ends inside a chunk") }
            let length = bytes[at..<at + 4].reduce(0) { $0 << 8 | Int($1) }
            guard length <= bytes.count - at - 12 else { throw .undecodable("the PNG ends inside a chunk") }
            let type = String(decoding: bytes[at + 4..<at + 8], as: UTF8.self)
            let end = at + 12 + length
            if kept.contains(type), type != "iCCP" || length <= iccBytesMax { out.append(contentsOf: bytes[at..<end]) }
            if type == "IEND" { return out }
            at = end
        }
    }
}
