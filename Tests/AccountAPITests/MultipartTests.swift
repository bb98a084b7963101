import Foundation
import HTTPTypes
import HummingbirdTesting
import Media
import MediaImages
import NIOCore
import Storage
import TestSupport
import Testing

@testable import AccountAPI

/// Our strict multipart reader: CRLF only, token header names, bounded; bodies that trapped MultipartKit (issues 27, 33)
/// are a 400 and the server keeps answering. A seeded fuzzer runs it on mutants of the committed corpus.
@Suite("Multipart bodies")
struct MultipartTests {
    static func parse(_ text: String) throws(MultipartError) -> [MultipartFormData.Part] {
        try MultipartFormData.parse(Array(text.utf8), boundary: "B")
    }

    @Test func readsPartsWithTheirNamesAndBodies() throws {
        let parts = try Self.parse(
            "preamble\r\n--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"Party Hat.png\"\r\nContent-Type: image/png\r\n\r\n"
                + "a\r\nb\r\n--B\r\ncontent-disposition: form-data; name=tags\r\n\r\nx,y\r\n--B--\r\nepilogue")
        #expect(parts.count == 2)
        #expect(parts[0].name == "file" && parts[0].filename == "Party Hat.png" && parts[0].header("Content-Type") == "image/png")
        #expect(parts[0].body == Array("a\r\nb".utf8))
        #expect(parts[1].name == "tags" && String(decoding: parts[1].body, as: UTF8.self) == "x,y")
        #expect(Multipart.fileStem(parts[0]) == "Party Hat")
        #expect(Multipart.boundary("multipart/form-data; boundary=\"B c\"") == "B c")
        #expect(Multipart.boundary("multipart/form-data") == nil)
    }

    /// Every way to disagree with another parser about where a header block ends is refused, not guessed.
    @Test(arguments: [
        "--B\r\nContent-Disposition: form-data; name=\"file\"\n\n\r\nX\u{ff}: y\r\n\r\nbody\r\n--B--\r\n",  // issue 33: bare LF
        "--B\r\nContent-Disposition: form-data; name=\"file\"\r\r\nx\r\n--B--\r\n",  // bare CR
        "--B\nContent-Disposition: form-data; name=\"file\"\n\nx\n--B--\n",  // LF only
        "--B\r\n\u{e9}: a\r\n\r\nx\r\n--B--\r\n",  // non-ASCII name (issue 27)
        "--B\r\nBad Name: a\r\n\r\nx\r\n--B--\r\n",  // a space in the name
        "--B\r\nA\u{0}B: a\r\n\r\nx\r\n--B--\r\n",  // NUL in the name
        "--B\r\nContent-Disposition: form-data;\r\n name=\"file\"\r\n\r\nx\r\n--B--\r\n",  // folded line
        "--B\r\nName: a\u{1}b\r\n\r\nx\r\n--B--\r\n",  // control byte in a value
        "--B\r\n: a\r\n\r\nx\r\n--B--\r\n",  // no name
        "--B\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nno closing boundary",
        "no boundary at all",
        "",
    ])
    func malformedBodiesAreRefused(_ text: String) {
        #expect(throws: MultipartError.self) { try Self.parse(text) }
    }

    @Test func limitsHold() {
        let many = String(repeating: "--B\r\nA: b\r\n\r\nx\r\n", count: 65) + "--B--\r\n"
        #expect(throws: MultipartError("At most 64 parts per request.")) { try Self.parse(many) }
        let headers = "--B\r\n" + String(repeating: "A: b\r\n", count: 17) + "\r\nx\r\n--B--\r\n"
        #expect(throws: MultipartError.self) { try Self.parse(headers) }
        let huge = "--B\r\nA: " + String(repeating: "b", count: 9000) + "\r\n\r\nx\r\n--B--\r\n"
        #expect(throws: MultipartError.self) { try Self.parse(huge) }
        #expect(throws: MultipartError.self) { try MultipartFormData.parse(Array("--\r\n".utf8), boundary: "") }
        #expect((try? Self.parse("--B--\r\n"))?.isEmpty == true)
    }

    /// Mutants of the corpus never trap; whatever parses re-serializes (CRLF, the same headers and bodies) to the same
    /// parts, so the reader has one meaning per body.
    @Test func fuzzNeverTrapsAndRoundTrips() async throws {
        let fuzzer = Fuzzer(corpus: try Fuzzer.corpus("multipart", root: repositoryRoot), iterationsMin: 1001)
        var accepted = 0
        let count = await fuzzer.run { input in
            guard let parts = try? MultipartFormData.parse(input, boundary: "B") else { return }
            accepted += 1
            var again: [UInt8] = []
            for part in parts {
                again += Array("--B\r\n".utf8)
                for header in part.headers { again += Array("\(header.name): \(header.value)\r\n".utf8) }
                again += Array("\r\n".utf8) + part.body + Array("\r\n".utf8)
            }
            again += Array("--B--\r\n".utf8)
            let reparsed = try? MultipartFormData.parse(again, boundary: "B")
            #expect(reparsed == parts, "round trip of \(input)")
        }
        #expect(count > 1000 && accepted > 0, "ran \(count) inputs, \(accepted) parsed")
    }

    @Test(arguments: Engine.allCases)
    func hostileUploadsAreA400AndTheServerStaysUp(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "mp@example.com")
            for corpusFile in try Fuzzer.corpus("multipart", root: repositoryRoot) {
                let response = try await client.execute(
                    uri: "/api/stickers/upload", method: .post,
                    headers: [.authorization: "Bearer \(token)", .contentType: "multipart/form-data; boundary=B"], body: ByteBuffer(bytes: corpusFile)
                )
                #expect(response.status.code < 500, "\(response.status) for \(corpusFile)")
            }
            #expect(try await client.get("/health", token: nil).status == .ok)
        }
    }

    /// A PNG that makes libvips warn megabytes (20,000 gAMA chunks) is processed in its turn: the worker's error output
    /// is drained while it runs (a full pipe once blocked it until the timeout, holding a thread of the shared pool).
    @Test(arguments: TestDatabase.engines)
    func anImageThatMakesTheWorkerChatterIsProcessed(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "chatter@example.com")
            let png = [UInt8](try ImageProcessor.testPNG(width: 300, height: 300))
            let gamma = ImageProcessor.pngChunk("gAMA", [0, 0, 0, 0])
            let hostile = Data(png[..<33] + Array(repeating: gamma, count: 20_000).joined() + png[33...])
            #expect(hostile.count > 300_000)
            let answer = try await client.uploadOwn(token, hostile)
            #expect(answer.status == .created, "\(answer.status) \(answer.text.prefix(300))")
            // An animation of more pixels over all frames than a phone should decode (64 × 1024², 354 KB as a GIF) is
            // refused, in the worker, with a reason.
            let long = try ImageProcessor.testImage(width: 1024, height: 1024, pages: 64, format: .gif)
            let refused = try await client.uploadOwn(token, long)
            #expect(refused.status == .badRequest && refused.text.contains("64 frames"), "\(long.count) bytes: \(refused.text.prefix(300))")
        }
    }

    /// The worker's memory is capped before it reads an image: under a cap too small for any decode it ends without an
    /// answer (which an upload reports as 400), and under the default one the same image is processed.
    @Test(.cpuBound) func theWorkersMemoryIsCapped() throws {
        let png = try ImageProcessor.testPNG(width: 300, height: 300)
        guard case .processed = try ImageWorker().process(png) else { Issue.record("refused under the default cap"); return }
        var tight = ImageRules()
        tight.memoryBytesMax = 4 << 20
        #expect(throws: ImageWorker.Failure.self) { try ImageWorker(rules: tight).process(png) }
    }

    /// One image per uploader in the worker at a time: another uploader is never queued behind it; an uploader's next
    /// image waits its turn; past `waitingPerOwnerMax` waiting, refused at once.
    @Test func imageJobsTakeTurnsPerUploader() async throws {
        let jobs = ImageJobs(waitingPerOwnerMax: 2)
        #expect(await jobs.begin("alice"))
        #expect(await jobs.begin("bob"))  // not behind alice
        let second = Task { await jobs.begin("alice") }
        let third = Task { await jobs.begin("alice") }
        // Until both wait (a fixed pause could end first on a loaded machine, and the next begin would then wait forever).
        try await waitUntil(every: .milliseconds(5)) { await jobs.waitingCount("alice") == 2 }
        try #require(await jobs.waitingCount("alice") == 2)
        #expect(await jobs.begin("alice") == false)  // two already waiting
        await jobs.end("alice")
        await jobs.end("alice")
        let (took2, took3) = (await second.value, await third.value)
        #expect(took2 && took3)
        await jobs.end("alice")
        #expect(await jobs.begin("alice"))  // free again
    }
}
