import Foundation
import Media
import MediaImages

// The image worker: the only program that loads libvips. The service starts it per upload (ImageWorker), so image
// decoding runs in a short-lived process of its own.
//   account-service-images process [RULES_JSON]   image bytes on stdin → ImageWorker's answer on stdout
//   account-service-images sample W H PAGES FORMAT   a generated test image on stdout (demo data, docs)
//   account-service-images bench COUNT               thumbnails per second of a 1024×1024 PNG, one core then all

let arguments = CommandLine.arguments.dropFirst()
let output = FileHandle.standardOutput

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("account-service-images: \(message)\n".utf8))
    exit(1)
}

/// Caps the process's private memory (heap and anonymous mappings): past it an allocation fails and the worker ends
/// without an answer, which the service reports as an image it could not process.
func capMemory(bytes: Int) {
    var limit = rlimit(rlim_cur: rlim_t(max(bytes, 0)), rlim_max: rlim_t(max(bytes, 0)))
    #if os(Linux)
    let resource = __rlimit_resource_t(RLIMIT_DATA.rawValue)
    #else
    let resource = RLIMIT_DATA
    #endif
    guard setrlimit(resource, &limit) == 0 else { fail("the memory limit could not be set (errno \(errno))") }
}

switch arguments.first {
case "process":
    let rules = arguments.dropFirst().first.flatMap { try? JSONDecoder().decode(ImageRules.self, from: Data($0.utf8)) } ?? ImageRules()
    capMemory(bytes: rules.memoryBytesMax)
    let input = FileHandle.standardInput.readDataToEndOfFile()
    let processor = try ImageProcessor(rules: rules)
    do {
        let (info, optimised, thumbnail) = try processor.process(input)
        output.write(ImageWorker.encode(.processed(info, image: optimised, thumbnail: thumbnail)))
    } catch let problem as ImageProblem {
        output.write(ImageWorker.encode(.refused(problem)))
    }
case "sample":
    let values = Array(arguments.dropFirst())
    guard values.count == 4, let width = Int(values[0]), let height = Int(values[1]), let pages = Int(values[2]),
        let format = ImageFormat(rawValue: values[3])
    else { fail("usage: sample WIDTH HEIGHT PAGES png|gif|webp") }
    output.write(try ImageProcessor.testImage(width: width, height: height, pages: pages, format: format))
case "bench":
    let count = arguments.dropFirst().first.flatMap(Int.init) ?? 40
    let processor = try ImageProcessor()
    let source = try ImageProcessor.testPNG(width: 1024, height: 1024)
    func seconds(since start: ContinuousClock.Instant) -> Double {
        let elapsed = ContinuousClock.now - start
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }
    var start = ContinuousClock.now
    for _ in 0..<count { _ = try processor.thumbnail(source) }
    let single = Double(count) / seconds(since: start)
    let cores = ProcessInfo.processInfo.activeProcessorCount
    start = ContinuousClock.now
    DispatchQueue.concurrentPerform(iterations: cores) { _ in for _ in 0..<count { _ = try? processor.thumbnail(source) } }
    let all = Double(cores * count) / seconds(since: start)
    print(
        String(format: "thumbnails source=1024x1024png bytes=%d one_core_per_s=%.2f cores=%d all_cores_per_s=%.2f", source.count, single, cores, all))
default:
    fail("usage: process [RULES_JSON] | sample W H PAGES FORMAT | bench [COUNT]")
}
