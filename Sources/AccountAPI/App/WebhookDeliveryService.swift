import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import Webhooks

/// Runs the webhook worker (``WebhookWorker``) for the application's lifetime; a graceful shutdown stops it between
/// passes (a try cut short by a kill stays leased until its lease lapses, then another pass or node retries it).
struct WebhookDeliveryService: NamedService {
    let dependencies: Dependencies
    let logger: Logger

    func run() async throws {
        guard dependencies.config.webhookWorker else {
            try? await gracefulShutdown()
            return
        }
        let sender = HTTPWebhookSender()
        let worker = WebhookWorker(
            database: dependencies.database, box: dependencies.secretBox, clock: dependencies.clock, settings: dependencies.config.webhooks,
            sender: sender, logger: logger)
        // A graceful shutdown stops the worker between passes: tries in flight finish (each within the send timeout)
        // and are recorded, so no delivery stays leased to this node. Past SHUTDOWN_GRACE_SECONDS the group cancels.
        let stopping = Mutex(false)
        await withGracefulShutdownHandler {
            // The first pass waits a moment, so it never races the start-up migrations.
            try? await Task.sleep(for: .seconds(dependencies.config.webhooks.pollSeconds))
            await worker.run(keepGoing: { !stopping.withLock { $0 } })
        } onGracefulShutdown: {
            stopping.withLock { $0 = true }
        }
        try? await sender.shutdown()
    }
}
