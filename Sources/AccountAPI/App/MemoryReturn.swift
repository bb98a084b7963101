import Logging
import ServiceLifecycle

#if canImport(Glibc)
import Glibc
#endif

/// Gives memory back to the system after a spike of request bodies (``BodyBudget/takeTrimDue()``): glibc keeps freed
/// pages in its arenas, so an outside tester's 1,200 slow bodies left the process at its peak size long after they were
/// gone. Checked every two seconds; `malloc_trim` runs only after a spike, never on a request's path.
struct MemoryReturn: Service {
    /// glibc's `malloc_trim` (not in Swift's Glibc module: it is declared in `malloc.h`), looked up by name; nil
    /// elsewhere (another C library, macOS), where nothing is done.
    static let mallocTrim: (@convention(c) (Int) -> Int32)? = {
        #if canImport(Glibc)
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int) -> Int32).self)
        #else
        return nil
        #endif
    }()

    let budget: BodyBudget
    let logger: Logger

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: .seconds(2))
                guard budget.takeTrimDue() else { continue }
                guard let trim = Self.mallocTrim else { continue }
                let returned = trim(0) == 1
                logger.info("memory given back after a spike of request bodies", metadata: ["returned": "\(returned)"])
            }
        }
    }
}
