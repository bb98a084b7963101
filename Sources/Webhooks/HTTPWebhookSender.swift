import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

/// Posts with async-http-client: redirects never followed, one timeout for the whole try, at most 64 KiB of an answer read.
public final class HTTPWebhookSender: WebhookSender {
    let client: HTTPClient

    public init() {
        var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow, timeout: .init(connect: .seconds(5)))
        configuration.decompression = .disabled
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    public func send(url: String, headers: [(String, String)], body: String, timeoutSeconds: Double) async -> SendOutcome {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        request.body = .bytes(ByteBuffer(string: body))
        do {
            let response = try await client.execute(request, timeout: .milliseconds(Int64(timeoutSeconds * 1000)))
            _ = try? await response.body.collect(upTo: 64 * 1024)
            return .status(Int(response.status.code))
        } catch {
            return .failure(String("\(error)".prefix(300)))
        }
    }

    public func shutdown() async throws { try await client.shutdown() }
}
