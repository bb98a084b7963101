import Foundation
import Synchronization
import Testing

@testable import Storage

/// ``RowLanes``: at most `width` run per key, in arrival order, other keys untouched; a full line refuses with `busy`;
/// a cancelled waiter leaves the line; a throwing body gives its place back.
@Suite("Row lanes")
struct RowLanesTests {
    /// Counts how many run at once, and the most seen.
    final class Gauge: Sendable {
        private let state = Mutex((now: 0, most: 0, order: [Int]()))
        func enter(_ number: Int) {
            state.withLock {
                $0.now += 1; $0.most = max($0.most, $0.now); $0.order.append(number)
            }
        }
        func leave() { state.withLock { $0.now -= 1 } }
        var most: Int { state.withLock { $0.most } }
        var order: [Int] { state.withLock { $0.order } }
    }

    @Test func fiftyParallelCallersOfOneKeyRunAtMostTwoAtATime() async throws {
        let lanes = RowLanes(width: 2, waitersMax: 100)
        let gauge = Gauge()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<50 {
                group.addTask {
                    try await lanes.run("user:1") {
                        gauge.enter(i)
                        try await Task.sleep(for: .milliseconds(2))
                        gauge.leave()
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(gauge.most == 2)
        #expect(gauge.order.count == 50)
        #expect(lanes.occupancy("user:1") == (0, 0), "an idle lane is forgotten")
    }

    @Test func anotherKeyIsNotHeldUpByAFullLane() async throws {
        let lanes = RowLanes(width: 1, waitersMax: 100)
        let release = AsyncStream<Void>.makeStream()
        let hot = Task { try await lanes.run("hot") { for await _ in release.stream { break } } }
        let queued = (0..<5).map { _ in Task { try await lanes.run("hot") {} } }
        while lanes.occupancy("hot").waiting < 5 { try await Task.sleep(for: .milliseconds(1)) }
        let other = try await lanes.run("cold") { "ran" }
        #expect(other == "ran")
        #expect(lanes.occupancy("hot") == (1, 5))
        release.continuation.yield()
        try await hot.value
        for task in queued { try await task.value }
        #expect(lanes.occupancy("hot") == (0, 0))
    }

    @Test func waitersAreAdmittedInArrivalOrder() async throws {
        let lanes = RowLanes(width: 1, waitersMax: 100)
        let gauge = Gauge()
        let release = AsyncStream<Void>.makeStream()
        let first = Task { try await lanes.run("k") { for await _ in release.stream { break } } }
        while lanes.occupancy("k").running < 1 { try await Task.sleep(for: .milliseconds(1)) }
        var tasks: [Task<Void, any Error>] = []
        for i in 0..<10 {
            tasks.append(
                Task {
                    try await lanes.run("k") {
                        gauge.enter(i); gauge.leave()
                    }
                })
            while lanes.occupancy("k").waiting < i + 1 { try await Task.sleep(for: .milliseconds(1)) }
        }
        release.continuation.yield()
        try await first.value
        for task in tasks { try await task.value }
        #expect(gauge.order == Array(0..<10))
    }

    @Test func aFullLineIsRefusedBusyAndACancelledWaiterLeavesIt() async throws {
        let lanes = RowLanes(width: 1, waitersMax: 2)
        let release = AsyncStream<Void>.makeStream()
        let holder = Task { try await lanes.run("k") { for await _ in release.stream { break } } }
        while lanes.occupancy("k").running < 1 { try await Task.sleep(for: .milliseconds(1)) }
        let waiting = (0..<2).map { _ in Task { try await lanes.run("k") { 1 } } }
        while lanes.occupancy("k").waiting < 2 { try await Task.sleep(for: .milliseconds(1)) }
        await #expect(throws: StorageError.self) { try await lanes.run("k") { 1 } }
        // Cancelling a waiter frees its place in the line at once.
        waiting[0].cancel()
        await #expect(throws: CancellationError.self) { try await waiting[0].value }
        #expect(lanes.occupancy("k") == (1, 1))
        let late = Task { try await lanes.run("k") { 2 } }
        while lanes.occupancy("k").waiting < 2 { try await Task.sleep(for: .milliseconds(1)) }
        release.continuation.yield()
        try await holder.value
        #expect(try await waiting[1].value == 1)
        #expect(try await late.value == 2)
        #expect(lanes.occupancy("k") == (0, 0))
    }

    @Test func aThrowingBodyGivesItsPlaceBack() async throws {
        struct Boom: Error {}
        let lanes = RowLanes(width: 1, waitersMax: 10)
        for _ in 0..<3 { await #expect(throws: Boom.self) { try await lanes.run("k") { throw Boom() } } }
        #expect(lanes.occupancy("k") == (0, 0))
        #expect(try await lanes.run("k") { 7 } == 7)
    }
}
