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

    /// The whole try — connect, send, the answer's head and at most 4 KiB of its body — ends by `timeoutSeconds` (a
    /// receiver trickling its body is cut off like one that never answers).
    public func send(url: String, headers: [(String, String)], body: String, timeoutSeconds: Double) async -> SendOutcome {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        request.body = .bytes(ByteBuffer(string: body))
        let client = client
        let prepared = request
        return await withTaskGroup(of: SendOutcome?.self) { group in
            group.addTask {
                do {
                    let response = try await client.execute(prepared, timeout: .milliseconds(Int64(timeoutSeconds * 1000)))
                    _ = try? await response.body.collect(upTo: 4096)
                    return .status(Int(response.status.code))
                } catch {
                    return .failure(String("\(error)".prefix(300)))
                }
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(timeoutSeconds))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first ?? .failure("no complete answer within \(Int(timeoutSeconds)) s")
        }
    }

    public func shutdown() async throws { try await client.shutdown() }
}
