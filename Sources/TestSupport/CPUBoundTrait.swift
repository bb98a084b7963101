import Testing

/// `@Suite(.cpuBound)` or `@Test(.cpuBound)`: the tests run on ``CPUBoundWork/executor`` rather than on the cooperative
/// pool every asynchronous test shares. For synchronous tests that compute for a while (source scans, fuzz loops): on
/// the pool they held its two threads while other tests' timers and database pools waited.
public struct CPUBoundTrait: TestTrait, SuiteTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        try await CPUBoundWork.run { try await function() }
    }
}

extension Trait where Self == CPUBoundTrait {
    public static var cpuBound: Self { CPUBoundTrait() }
}
