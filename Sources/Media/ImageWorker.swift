import Foundation

/// Runs image work in the separate `account-service-images` program (one short-lived process per image): the service
/// never loads libvips and its ~120 libraries (about 25 MiB of resident memory at idle), and a decoder bug in a hostile
/// upload cannot reach the service's memory. The worker lives next to the service's executable, or at `IMAGE_WORKER`.
public struct ImageWorker: Sendable {
    public enum Answer: Sendable, Equatable {
        case processed(ImageInfo, image: Data, thumbnail: Data)
        case refused(ImageProblem)
    }

    public enum Failure: Error, CustomStringConvertible {
        case missing(String)
        case failed(String)
        public var description: String {
            switch self {
            case .missing(let path): "the image worker is missing at \(path) (build it: swift build; or set IMAGE_WORKER)"
            case .failed(let why): "the image worker failed: \(why)"
            }
        }
    }

    public let path: String
    public let rules: ImageRules
    /// How long one image may take before the worker is stopped.
    public let timeoutSeconds: Double

    public init(path: String? = nil, rules: ImageRules = ImageRules(), timeoutSeconds: Double = 20) {
        self.path = path ?? Self.defaultPath()
        self.rules = rules
        self.timeoutSeconds = timeoutSeconds
    }

    /// `IMAGE_WORKER`, else `account-service-images` next to the running executable.
    public static func defaultPath() -> String {
        if let configured = ProcessInfo.processInfo.environment["IMAGE_WORKER"], !configured.isEmpty { return configured }
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        let base = FileManager.default.fileExists(atPath: executable.path) ? executable : (Bundle.main.executableURL ?? executable)
        return base.deletingLastPathComponent().appendingPathComponent("account-service-images").path
    }

    public var isAvailable: Bool { FileManager.default.isExecutableFile(atPath: path) }

    /// Checks an image against the rules and makes its thumbnail and (PNG) lossless re-encoding. Blocking: call it off
    /// the event loops.
    public func process(_ image: Data) throws -> Answer {
        let rules = String(decoding: try JSONEncoder().encode(rules), as: UTF8.self)
        return try Self.decode(try run(["process", rules], input: image))
    }

    /// A generated test image (a gradient; `pages` > 1 makes an animation).
    public func sample(width: Int, height: Int, pages: Int = 1, format: ImageFormat) throws -> Data {
        try run(["sample", String(width), String(height), String(pages), format.rawValue], input: Data())
    }

    /// The worker's thumbnail benchmark line.
    public func bench(count: Int) throws -> String {
        String(decoding: try run(["bench", String(count)], input: Data()), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func run(_ arguments: [String], input: Data) throws -> Data {
        guard isAvailable else { throw Failure.missing(path) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let (stdin, stdout, stderr) = (Pipe(), Pipe(), Pipe())
        (process.standardInput, process.standardOutput, process.standardError) = (stdin, stdout, stderr)
        try process.run()
        let timer = DispatchWorkItem { if process.isRunning { process.terminate() } }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeoutSeconds, execute: timer)
        defer { timer.cancel() }
        // The worker reads all of its input before it writes: write, close, then read.
        let writer = Thread {
            stdin.fileHandleForWriting.write(input); try? stdin.fileHandleForWriting.close()
        }
        writer.start()
        // Its error output is drained at the same time (a hostile PNG makes libvips warn megabytes; a full pipe would
        // block the worker until the timeout), keeping the first 300 bytes for the log.
        let errors = ErrorTail()
        let drainer = Thread {
            let handle = stderr.fileHandleForReading
            while case let chunk = handle.availableData, !chunk.isEmpty { errors.append(chunk) }
            errors.finish()
        }
        drainer.start()
        let output = stdout.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let errorText = errors.waitForEnd()
        guard process.terminationReason == .exit, process.terminationStatus == 0 else {
            throw Failure.failed("exit \(process.terminationStatus): \(errorText)")
        }
        return output
    }

    /// The first bytes of the worker's error output, collected on the drainer's thread.
    final class ErrorTail: @unchecked Sendable {
        private let lock = NSCondition()
        private var kept = Data()
        private var ended = false
        static let keptBytesMax = 300

        func append(_ chunk: Data) {
            lock.lock()
            defer { lock.unlock() }
            if kept.count < Self.keptBytesMax { kept.append(chunk.prefix(Self.keptBytesMax - kept.count)) }
        }

        func finish() {
            lock.lock()
            ended = true
            lock.broadcast()
            lock.unlock()
        }

        func waitForEnd() -> String {
            lock.lock()
            defer { lock.unlock() }
            while !ended { lock.wait() }
            return String(decoding: kept, as: UTF8.self)
        }
    }

    /// The worker's answer: one JSON line (the info or the problem, and the byte counts), then the image, then the
    /// thumbnail.
    public static func encode(_ answer: Answer) -> Data {
        struct Head: Codable { var info: ImageInfo?; var problem: ImageProblem?; var imageBytes = 0; var thumbnailBytes = 0 }
        switch answer {
        case .processed(let info, let image, let thumbnail):
            let head = Head(info: info, problem: nil, imageBytes: image.count, thumbnailBytes: thumbnail.count)
            return ((try? JSONEncoder().encode(head)) ?? Data()) + Data("\n".utf8) + image + thumbnail
        case .refused(let problem):
            return ((try? JSONEncoder().encode(Head(info: nil, problem: problem))) ?? Data()) + Data("\n".utf8)
        }
    }

    public static func decode(_ data: Data) throws -> Answer {
        struct Head: Codable { var info: ImageInfo?; var problem: ImageProblem?; var imageBytes = 0; var thumbnailBytes = 0 }
        guard let newline = data.firstIndex(of: UInt8(ascii: "\n")), let head = try? JSONDecoder().decode(Head.self, from: data[..<newline])
        else { throw Failure.failed("an answer that could not be read") }
        if let problem = head.problem { return .refused(problem) }
        let body = data[data.index(after: newline)...]
        guard let info = head.info, head.imageBytes >= 0, head.thumbnailBytes >= 0, head.imageBytes <= body.count,
            body.count - head.imageBytes == head.thumbnailBytes
        else {
            throw Failure.failed("an answer of the wrong length")
        }
        let image = Data(body.prefix(head.imageBytes))
        return .processed(info, image: image, thumbnail: Data(body.suffix(head.thumbnailBytes)))
    }
}
