import Logging
import ServiceLifecycle

#if canImport(Glibc)
import Glibc
#endif

/// Gives memory back to the system after a spike of request bodies (``BodyBudget/takeTrimDue()``) or of connections
/// (``ClientConnections/takeTrimDue()``): glibc keeps freed pages in its arenas, so an outside tester's 1,200 slow
/// bodies (and later 12,000 unfinished headers) left the process at its peak size long after they were gone. Checked every two seconds; `malloc_trim` runs only after a spike, at most every 30 s, outside any request.
struct MemoryReturn: NamedService {
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
    let connections: ClientConnections
    let logger: Logger
    /// The least time between two trims (each walks the allocator's arenas under their locks).
    static let spacing = Duration.seconds(30)

    func run() async throws {
        guard let trim = Self.mallocTrim else {
            return logger.info("malloc_trim is not available here (not glibc, or linked statically): memory is not given back")
        }
        try? await cancelWhenGracefulShutdown {
            var last = ContinuousClock.now - Self.spacing
            while !Task.isCancelled {
                try await Task.sleep(for: .seconds(2))
                // Bodies declared and never sent count as a spike too: at most one trim per `spacing`, whatever a client does.
                guard ContinuousClock.now - last >= Self.spacing else { continue }
                let bodies = budget.takeTrimDue()
                guard connections.takeTrimDue() || bodies else { continue }
                last = ContinuousClock.now
                let returned = trim(0) == 1
                logger.info("memory given back after a spike of request bodies or connections", metadata: ["returned": "\(returned)"])
            }
        }
    }
}
