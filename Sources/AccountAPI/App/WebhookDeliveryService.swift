import Foundation
import Logging
import ServiceLifecycle
import Webhooks

/// Runs the webhook worker (``WebhookWorker``) for the application's lifetime; a graceful shutdown stops it between
/// tries (a try cut short is leased, so another pass or node retries it).
struct WebhookDeliveryService: Service {
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
        await cancelWhenGracefulShutdown {
            // The first pass waits a moment, so it never races the start-up migrations.
            try? await Task.sleep(for: .seconds(dependencies.config.webhooks.pollSeconds))
            await worker.run()
        }
        try? await sender.shutdown()
    }
}
