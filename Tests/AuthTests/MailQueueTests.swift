import Foundation
import Logging
import Synchronization
import TestSupport
import Testing

@testable import Mail

/// Records when each message reached it.
private final class ClockedMailer: Mailer {
    let sent = Mutex<[(String, ContinuousClock.Instant)]>([])

    func send(_ message: MailMessage, logger: Logger) async throws {
        sent.withLock { $0.append((message.to, .now)) }
    }
}

@Suite("The mail queue")
struct MailQueueTests {
    let logger = Logger(label: "test")

    @Test func mailLeavesAfterAPauseFromIdleAndABacklogWithoutMore() async throws {
        let transport = ClockedMailer()
        let pause = Duration.milliseconds(3_000)
        let queue = MailQueue(transport: transport, dispatchDelay: 3_000...3_000, logger: logger)
        let queued = ContinuousClock.now
        for i in 0..<12 { await queue.enqueue(MailMessage(to: "\(i)@example.com", subject: "s", body: "b")) }
        let allQueued = ContinuousClock.now
        try await waitUntil(within: .seconds(60)) { transport.sent.withLock { $0.count == 12 } }
        let sent = transport.sent.withLock { $0 }
        #expect(Set(sent.map(\.0)) == Set((0..<12).map { "\($0)@example.com" }))
        if let first = sent.map(\.1).min() {
            #expect(first - queued >= pause, "the first waited out the pause")
            // On a starved machine the twelve enqueues can outlast the pause: the queue then went idle in between and
            // rightly paused again, so the one-pause claim holds only when all twelve were queued before the first left.
            // Counted, not timed: the batches' sends themselves can take seconds on a loaded machine.
            if allQueued < first {
                #expect(await queue.pausesTaken == 1, "three batches of four, one pause: not one pause per batch")
            }
        }
    }

    @Test func flushCutsThePauseShort() async throws {
        let transport = ClockedMailer()
        let queue = MailQueue(transport: transport, dispatchDelay: 60_000...60_000, logger: logger)
        for i in 0..<6 { await queue.enqueue(MailMessage(to: "\(i)@example.com", subject: "s", body: "b")) }
        let started = ContinuousClock.now
        await queue.flush()
        #expect(ContinuousClock.now - started < .seconds(30), "not the minute-long pause")
        #expect(Set(transport.sent.withLock { $0.map(\.0) }) == Set((0..<6).map { "\($0)@example.com" }))
        // The next message waits its pause again.
        await queue.enqueue(MailMessage(to: "late@example.com", subject: "s", body: "b"))
        try await Task.sleep(for: .milliseconds(50))
        #expect(transport.sent.withLock { $0.count } == 6)
        await queue.flush()
        #expect(transport.sent.withLock { $0.count } == 7)
    }
}
