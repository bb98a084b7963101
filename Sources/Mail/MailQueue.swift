import Foundation
import Logging
import Metrics
import ServiceLifecycle
import Traces

/// Mail goes out after the answer. The auth flows hand their messages to this queue after their transaction commits and
/// answer at once; a drainer sends them in the background (four at a time), so neither a slow transport nor whether a
/// message was sent at all shows in the answer's timing (docs/security.md, "Same answer, same time"). When sending
/// starts from idle it first waits a random ``dispatchDelay``: starting a transport (sendmail is a process) costs CPU,
/// and at a fixed moment right after the answer it would slow the next request of whoever caused it. At a random later
/// moment it slows whatever request is running then, a known address's or an unknown one's alike. A backlog is sent
/// without further pauses.
///
/// The queue lives in memory and is bounded: past ``capacity`` the oldest message is dropped and counted
/// (`mail_dropped_total`). What it holds when the process dies is lost; every message it carries can be asked for again
/// (a code by resend-otp or forgot-password; notices are informational). On a graceful shutdown ``MailQueueService``
/// waits for it to empty.
public actor MailQueue {
    public let capacity: Int
    let transport: any Mailer
    let logger: Logger
    /// Each message with the span it was queued in (its send is traced as that request's child).
    private var pending: [(message: MailMessage, parent: Traces.Parent?)] = []
    private var draining = false
    private var idleWaiters: [CheckedContinuation<Void, Never>] = []
    /// The drainer's current pause, cut short by ``flush()``.
    private var pause: Task<Void, Never>?
    private var hurry = false
    /// How many pauses the drainer has taken (tests: a backlog takes one).
    private(set) var pausesTaken = 0
    /// How long each batch waits before it is handed to the transport, drawn uniformly (milliseconds).
    public let dispatchDelay: ClosedRange<Int>
    private static let sendsInFlightMax = 4
    private static let dropped = Counter(label: "mail_dropped_total")
    private static let failed = Counter(label: "mail_failed_total")

    public init(transport: any Mailer, capacity: Int = 10_000, dispatchDelay: ClosedRange<Int> = 20...150, logger: Logger) {
        self.transport = transport
        self.capacity = max(1, capacity)
        self.dispatchDelay = max(0, dispatchDelay.lowerBound)...max(0, dispatchDelay.upperBound)
        self.logger = logger
    }

    /// Queues `message` and returns at once.
    public func enqueue(_ message: MailMessage) {
        if pending.count >= capacity {
            pending.removeFirst()
            Self.dropped.increment()
            logger.error("mail queue full: the oldest message was dropped", metadata: ["capacity": "\(capacity)"])
        }
        pending.append((message, Traces.parent()))
        guard !draining else { return }
        draining = true
        Task { await self.drain() }
    }

    /// Returns when every message queued so far has been handed to the transport (sent or failed), without the random
    /// pauses: a graceful shutdown (and a test) need not wait them out.
    public func flush() async {
        guard draining || !pending.isEmpty else { return }
        hurry = true
        pause?.cancel()
        await withCheckedContinuation { idleWaiters.append($0) }
    }

    private func drain() async {
        // Once, when sending starts from idle: a backlog then goes out as fast as the transport takes it.
        if !hurry {
            pausesTaken += 1
            let milliseconds = Int.random(in: dispatchDelay)
            let wait = Task { _ = try? await Task.sleep(for: .milliseconds(milliseconds)) }
            pause = wait
            await wait.value
            pause = nil
        }
        while !pending.isEmpty {
            let batch = Array(pending.prefix(Self.sendsInFlightMax))
            pending.removeFirst(batch.count)
            let transport = self.transport
            let logger = self.logger
            await withTaskGroup(of: Void.self) { group in
                for (message, parent) in batch {
                    group.addTask {
                        do {
                            try await Traces.span("mail.send", client: true, parent: parent) { try await transport.send(message, logger: logger) }
                        } catch {
                            // Never log the body: it may carry a code.
                            Self.failed.increment()
                            logger.error("mail delivery failed", metadata: ["kind": "\(message.kind)", "error": "\(error)"])
                        }
                    }
                }
            }
        }
        draining = false
        hurry = false
        let waiters = idleWaiters
        idleWaiters = []
        for waiter in waiters { waiter.resume() }
    }
}

/// A ``Mailer`` that queues: `send` returns as soon as the message is in the ``MailQueue``.
public struct QueuedMailer: Mailer {
    public let queue: MailQueue

    public init(queue: MailQueue) { self.queue = queue }

    public func send(_ message: MailMessage, logger: Logger) async throws { await queue.enqueue(message) }
}

/// Runs until the application shuts down, then waits for the mail queue to empty (each transport bounds its own send).
/// It describes itself by name: ServiceLifecycle logs every service as `"\(service)"`, which would otherwise reflect the
/// queue.
public struct MailQueueService: Service, CustomStringConvertible {
    let queue: MailQueue
    public var description: String { "MailQueueService" }

    public init(queue: MailQueue) { self.queue = queue }

    public func run() async throws {
        try? await gracefulShutdown()
        await queue.flush()
    }
}
