import Foundation
import Testing

@testable import Media
@testable import MediaImages

@Suite("Media: images, blobs, signed URLs")
struct MediaTests {
    let images: ImageProcessor

    init() throws { images = try ImageProcessor() }

    @Test func formatsAreRecognisedByContentNotByName() throws {
        let png = try ImageProcessor.testPNG(width: 300, height: 200)
        #expect(ImageFormat.sniff(png) == .png)
        #expect(ImageFormat.sniff(Array("GIF89a....".utf8)) == .gif)
        #expect(ImageFormat.sniff(Array("RIFF\0\0\0\0WEBPVP8 ".utf8)) == .webp)
        #expect(ImageFormat.sniff(Array("<svg xmlns=\"http://www.w3.org/2000/svg\"/>".utf8)) == nil)
        #expect(ImageFormat.sniff([0xFF, 0xD8, 0xFF, 0xE0]) == nil)  // JPEG is not a sticker format
        #expect(throws: ImageProblem.unsupportedFormat) { try images.inspect(Data("<svg onload=\"alert(1)\"/>".utf8)) }
    }

    @Test func sizesAndBytesAreChecked() throws {
        let info = try images.inspect(try ImageProcessor.testPNG(width: 300, height: 200))
        #expect(info == ImageInfo(format: .png, width: 300, height: 200, pages: 1, hasAlpha: true))
        #expect(throws: ImageProblem.dimensions(width: 100, height: 100, min: 200, max: 1024)) {
            try images.inspect(try ImageProcessor.testPNG(width: 100, height: 100))
        }
        #expect(throws: ImageProblem.dimensions(width: 1100, height: 300, min: 200, max: 1024)) {
            try images.inspect(try ImageProcessor.testPNG(width: 1100, height: 300))
        }
        var oversize = try ImageProcessor.testPNG(width: 300, height: 300)
        oversize.append(Data(count: 600 * 1024))
        #expect(throws: ImageProblem.tooLarge(bytes: oversize.count, limit: 500 * 1024)) { try images.inspect(oversize) }
        // A PNG signature followed by garbage is refused by the decoder, not trusted.
        var broken = Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        broken.append(Data(repeating: 7, count: 200))
        #expect(throws: ImageProblem.self) { try images.inspect(broken) }
    }

    @Test func thumbnailsFitTheBoxKeepAspectAndAlpha() throws {
        let thumbnail = try images.thumbnail(try ImageProcessor.testPNG(width: 400, height: 200))
        var relaxed = ImageProcessor.Rules()
        relaxed.minSide = 1
        let info = try ImageProcessor(rules: relaxed).inspect(thumbnail)
        #expect(info.format == .png && info.width == 100 && info.height == 50 && info.hasAlpha)
        let original = try ImageProcessor.testPNG(width: 1024, height: 1024)
        let optimised = try images.strippedPNG(original)
        #expect(optimised.count <= original.count)
        #expect(try images.inspect(optimised).width == 1024)
    }

    /// Issue 33: a PNG whose re-encoding was not smaller used to be stored as uploaded, metadata and trailing bytes included.
    @Test func pngsAreAlwaysReencodedToTheirPixelsOnly() throws {
        let original = [UInt8](try ImageProcessor.testPNG(width: 256, height: 256))
        // A tEXt chunk (with its CRC) before IEND, and an HTML page after it.
        let iend = original.count - 12
        let chunk = ImageProcessor.pngChunk("tEXt", Array("GPS\u{0}47.3769 N, 8.5417 E".utf8))
        let hostile = Data(original[..<iend] + chunk + original[iend...] + Array("<html><script>alert(1)</script>".utf8))
        #expect(hostile.count > original.count + 40)
        let stored = try images.strippedPNG(hostile)
        #expect(stored.range(of: Data("GPS".utf8)) == nil && stored.range(of: Data("<html>".utf8)) == nil)
        #expect(try images.inspect(stored).width == 256)
    }

    /// An outside tester's upload: a small PNG carrying compressed text chunks that every decode inflated (2.8 GiB in the
    /// image worker for 40 chunks of 10 MB). The decoder now sees only the chunks that make the pixels; the answer is the
    /// same as for the PNG without them.
    @Test func pngChunksThatMakeNoPixelsNeverReachTheDecoder() throws {
        let original = [UInt8](try ImageProcessor.testPNG(width: 256, height: 256))
        let afterHeader = 8 + 25  // signature, IHDR
        var extra: [UInt8] = []
        for type in ["zTXt", "iTXt", "tEXt", "eXIf", "acTL", "prIv"] { extra += ImageProcessor.pngChunk(type, Array(repeating: 0x78, count: 5_000)) }
        let bigProfile = ImageProcessor.pngChunk("iCCP", Array(repeating: 0x78, count: PNGChunks.iccBytesMax + 1))
        let smallProfile = ImageProcessor.pngChunk("iCCP", Array("p\u{0}\u{0}x".utf8))
        let hostile = Data(original[..<afterHeader] + extra + bigProfile + original[afterHeader...] + Array("trailing".utf8))
        let kept = try PNGChunks.decodingOnly(hostile)
        #expect(kept == Data(original), "only the chunks of the original remain")
        let withProfile = Data(original[..<afterHeader] + smallProfile + original[afterHeader...])
        #expect(try PNGChunks.decodingOnly(withProfile) == withProfile, "a small ICC profile stays")
        let (info, _, thumbnail) = try images.process(hostile)
        let plain = try images.process(Data(original))
        #expect(info == plain.info && thumbnail == plain.thumbnail)
        #expect(throws: ImageProblem.self) { try PNGChunks.decodingOnly(Data(original.dropLast(1))) }
    }

    /// The chunk filter reads untrusted bytes: every truncation, and random bytes and chunk lengths after a PNG
    /// signature, give a PNG that ends with `IEND` or `undecodable`, never a trap.
    @Test func theChunkFilterTakesAnyBytes() throws {
        let original = [UInt8](try ImageProcessor.testPNG(width: 64, height: 64))
        var generator = SystemRandomNumberGenerator()
        var inputs: [[UInt8]] = (0...original.count).map { Array(original.prefix($0)) }
        for _ in 0..<3_000 {
            var bytes = original
            for _ in 0..<Int.random(in: 1...6, using: &generator) {
                bytes[Int.random(in: 8..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
            }
            inputs.append(bytes)
            inputs.append(
                PNGChunks.signature + (0..<Int.random(in: 0...64, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) })
        }
        for input in inputs {
            do {
                let kept = [UInt8](try PNGChunks.decodingOnly(Data(input)))
                #expect(kept.starts(with: PNGChunks.signature) && kept.count <= input.count)
                #expect(Data(kept).range(of: Data("IEND".utf8)) != nil)
            } catch {
                guard case .undecodable = error else { Issue.record("\(error)"); continue }
            }
        }
    }

    @Test func animatedGIFsAndWebPsAreReadAndThumbnailedFromTheirFirstFrame() throws {
        let gif = try ImageProcessor.testImage(width: 240, height: 220, pages: 3, format: .gif)
        let info = try images.inspect(gif)
        #expect(info.format == .gif && info.width == 240 && info.height == 220 && info.pages == 3 && info.isAnimated)
        let webp = try ImageProcessor.testImage(width: 300, height: 300, format: .webp)
        #expect(try images.inspect(webp).format == .webp && !(try images.inspect(webp).isAnimated))
        var relaxed = ImageProcessor.Rules()
        relaxed.minSide = 1
        for source in [gif, webp] {
            let thumbnail = try ImageProcessor(rules: relaxed).inspect(try images.thumbnail(source))
            #expect(thumbnail.format == .png && max(thumbnail.width, thumbnail.height) == 100 && thumbnail.pages == 1)
        }
    }

    /// Animations are bounded by frames and by pixels over all frames, whatever their byte size.
    @Test func animationsAreBoundedByFramesAndPixels() throws {
        var rules = ImageProcessor.Rules()
        rules.maxPages = 4
        rules.maxPixels = 240 * 220 * 3
        let bounded = try ImageProcessor(rules: rules)
        #expect(try bounded.inspect(try ImageProcessor.testImage(width: 240, height: 220, pages: 3, format: .gif)).pages == 3)
        #expect(throws: ImageProblem.frames(pages: 5, width: 200, height: 200, maxPages: 4, maxPixels: 240 * 220 * 3)) {
            try bounded.inspect(try ImageProcessor.testImage(width: 200, height: 200, pages: 5, format: .gif))
        }
        #expect(throws: ImageProblem.frames(pages: 4, width: 240, height: 220, maxPages: 4, maxPixels: 240 * 220 * 3)) {
            try bounded.inspect(try ImageProcessor.testImage(width: 240, height: 220, pages: 4, format: .gif))
        }
        #expect(ImageRules().maxPages == 250 && ImageRules().maxPixels == 64_000_000)
    }

    @Test func blobsAreContentAddressed() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("blobs-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try FileBlobStore(directory: directory)
        let key = try await store.put(Data("hello".utf8), fileExtension: "png")
        #expect(key == "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824.png")
        #expect(try await store.put(Data("hello".utf8), fileExtension: "png") == key)
        #expect(try await store.get(key) == Data("hello".utf8))
        #expect(try await store.get("../../etc/passwd") == nil)
        #expect(try await store.get(String(repeating: "0", count: 64) + ".png") == nil)
    }

    /// A removal leaves a file alone that was written or stored again within its grace (an upload of the same bytes
    /// may be about to reference it), and a put after the removal began writes a fresh copy; a file set aside by a
    /// removal that stopped half-way goes with the next removal of its key.
    @Test func removalSparesFilesWrittenWithinTheGrace() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("blobs-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try FileBlobStore(directory: directory)
        let key = try await store.put(Data("hello".utf8), fileExtension: "png")
        let path = store.url(key).path
        let old = Date(timeIntervalSinceNow: -3600)
        try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: path)
        // Stored again: the time is renewed, so a removal within the grace keeps it.
        #expect(try await store.put(Data("hello".utf8), fileExtension: "png") == key)
        #expect(try await store.delete(key, unlessWrittenWithin: 600) == false)
        #expect(try await store.get(key) == Data("hello".utf8))
        // Old enough: removed; removing again is no failure.
        try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: path)
        #expect(try await store.delete(key, unlessWrittenWithin: 600))
        #expect(try await store.get(key) == nil && !FileManager.default.fileExists(atPath: path + ".removing"))
        #expect(try await store.delete(key, unlessWrittenWithin: 600))
        // A put while the file is set aside writes a fresh copy, which the removal leaves.
        _ = try await store.put(Data("hello".utf8), fileExtension: "png")
        try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: path)
        try FileManager.default.moveItem(atPath: path, toPath: path + ".removing")
        _ = try await store.put(Data("hello".utf8), fileExtension: "png")
        #expect(try await store.delete(key, unlessWrittenWithin: 600) == false, "the fresh copy is set aside and put back")
        #expect(try await store.get(key) == Data("hello".utf8))
        // Left aside by a stopped removal and referenced again: restored.
        try FileManager.default.moveItem(atPath: path, toPath: path + ".removing")
        try await store.restore(key)
        #expect(try await store.get(key) == Data("hello".utf8))
        try await store.restore(key)
        // Left aside by a stopped removal, the key itself gone: the next removal takes it.
        try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: path)
        try FileManager.default.moveItem(atPath: path, toPath: path + ".removing")
        #expect(try await store.delete(key, unlessWrittenWithin: 600))
        #expect(!FileManager.default.fileExists(atPath: path + ".removing") && !FileManager.default.fileExists(atPath: path))
    }

    @Test func signedURLsExpireAndCannotBeAltered() throws {
        let signer = URLSigner(secret: Data("a secret of at least thirty-two bytes".utf8), lifetimeSeconds: 3600, windowSeconds: 600)
        let now = Date(timeIntervalSince1970: 1_800_000_100)
        let key = String(repeating: "a", count: 64) + ".png"
        let url = signer.signedURL(key, now: now)
        let query = Dictionary(
            uniqueKeysWithValues: url.split(separator: "?")[1].split(separator: "&").map { pair in
                let kv = pair.split(separator: "=", maxSplits: 1)
                return (String(kv[0]), String(kv[1]))
            })
        let (exp, sig) = (query["exp"]!, query["sig"]!)
        #expect(Int(exp)! >= 1_800_003_700 && Int(exp)! < 1_800_003_700 + 600)
        #expect(signer.verify(key, exp: exp, sig: sig, now: now))
        #expect(signer.signedURL(key, now: now.addingTimeInterval(30)) == url)  // the same within a window
        #expect(!signer.verify(key, exp: exp, sig: sig, now: Date(timeIntervalSince1970: Double(exp)!)))  // expired
        #expect(!signer.verify(key, exp: String(Int(exp)! + 600), sig: sig, now: now))  // a later expiry
        #expect(!signer.verify(String(repeating: "b", count: 64) + ".png", exp: exp, sig: sig, now: now))  // another file
        #expect(!signer.verify(key, exp: exp, sig: nil, now: now) && !signer.verify(key, exp: exp, sig: "AAAA", now: now))
        let other = URLSigner(secret: Data("another secret of at least thirty-two".utf8))
        #expect(!other.verify(key, exp: exp, sig: sig, now: now))
    }
}
