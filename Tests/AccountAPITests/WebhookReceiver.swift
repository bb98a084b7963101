import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import Networks
import Storage
import Synchronization
import TestSupport
import Webhooks

@testable import AccountAPI

/// A local webhook receiver on 127.0.0.1: records every request and answers the next scripted status (then 200).
final class WebhookReceiver: Sendable {
    struct Received: Sendable {
        let id: String
        let timestamp: Int64
        let signature: String
        let body: String
        var type: String { (try? JSONDecoder().decode(Envelope.self, from: Data(body.utf8)).type) ?? "" }
        var data: [String: JSONValue] { (try? JSONDecoder().decode(Envelope.self, from: Data(body.utf8)).data) ?? [:] }
    }
    struct Envelope: Decodable { let type: String; let timestamp: String; let data: [String: JSONValue] }

    /// One client for every test (async-http-client clients must be shut down; this one lives as long as the process).
    static let sender = HTTPWebhookSender()

    let received = Mutex<[Received]>([])
    let script = Mutex<[Int]>([])

    func answer(_ statuses: [Int]) { script.withLock { $0 = statuses } }
    var all: [Received] { received.withLock { $0 } }

    /// Runs the receiver around `body`, which gets its base URL.
    func run(_ body: @Sendable (String) async throws -> Void) async throws {
        let router = Router()
        router.post("/hook") { request, context -> Response in
            let buffer = try await request.body.collect(upTo: 1 << 20)
            let headers = request.headers
            self.received.withLock {
                $0.append(
                    Received(
                        id: headers[HTTPField.Name("webhook-id")!] ?? "", timestamp: Int64(headers[HTTPField.Name("webhook-timestamp")!] ?? "") ?? 0,
                        signature: headers[HTTPField.Name("webhook-signature")!] ?? "", body: String(buffer: buffer)))
            }
            let status = self.script.withLock { $0.isEmpty ? 200 : $0.removeFirst() }
            return Response(status: .init(code: status))
        }
        // A receiver that answers 200 at once and then trickles its body, one byte a second.
        router.post("/trickle") { _, _ -> Response in
            Response(
                status: .ok, headers: [.contentLength: "1000"],
                body: ResponseBody { writer in
                    for _ in 0..<1000 {
                        try await writer.write(ByteBuffer(string: "a"))
                        try await Task.sleep(for: .seconds(1))
                    }
                    try await writer.finish(nil)
                })
        }
        try await withLocalServer(router) { base in try await body(base + "/hook") }
    }
}

/// Runs `router` on 127.0.0.1 (a free port) around `body`, which gets the server's base URL.
func withLocalServer(_ router: Router<BasicRequestContext>, _ body: @Sendable (String) async throws -> Void) async throws {
    let port = Mutex<Int?>(nil)
    var logger = Logger(label: "local-server")
    logger.logLevel = .critical
    let app = Application(
        router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
        onServerRunning: { channel in port.withLock { $0 = channel.localAddress?.port } }, logger: logger)
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await app.runService(gracefulShutdownSignals: []) }
        while port.withLock({ $0 }) == nil { try await Task.sleep(for: .milliseconds(10)) }
        defer { group.cancelAll() }
        try await body("http://127.0.0.1:\(port.withLock { $0 }!)")
    }
}

extension TestApp {
    /// The worker on the test clock, posting for real to local receivers.
    func webhookWorker(sender: any WebhookSender) -> WebhookWorker {
        WebhookWorker(
            database: dependencies.database, box: dependencies.secretBox, clock: clock, settings: dependencies.config.webhooks, sender: sender,
            logger: TestDatabase.logger)
    }

    /// Runs worker passes until nothing is left to dispatch or due now.
    func deliverWebhooks(_ worker: WebhookWorker) async throws {
        for _ in 0..<50 {
            let (dispatched, sent) = try await worker.runOnce()
            if dispatched == 0 && sent == 0 { return }
        }
    }

    /// Allows http to loopback receivers.
    static let webhookConfig: @Sendable (inout AppConfig) -> Void = { config in
        config.webhooks.urlPolicy = WebhookURLPolicy(allowHTTP: true, allowedNetworks: [IPNetwork("127.0.0.0/8")!])
    }
}
