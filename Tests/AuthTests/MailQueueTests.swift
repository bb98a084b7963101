import Foundation
import Logging
import Mail
import Synchronization
import Testing

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

    @Test func aMessageLeavesAfterARandomPauseNotWithTheAnswer() async throws {
        let transport = ClockedMailer()
        let queue = MailQueue(transport: transport, dispatchDelay: 60...80, logger: logger)
        let queued = ContinuousClock.now
        await queue.enqueue(MailMessage(to: "a@example.com", subject: "s", body: "b"))
        let deadline = ContinuousClock.now + .seconds(30)
        while transport.sent.withLock({ $0.isEmpty }) && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        let sent = transport.sent.withLock { $0 }
        #expect(sent.map(\.0) == ["a@example.com"])
        if let (_, at) = sent.first { #expect(at - queued >= .milliseconds(60), "it waited out its pause") }
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
