import Foundation
import HTTPTypes
import Hummingbird
import Ledger
import NIOCore

/// The HTTP side of idempotent writes (the rules are `Ledger/Idempotency.swift`): the `Idempotency-Key` header, the
/// stored answer's format, and the response (`Idempotent-Replayed: true` on a replay).
enum IdempotentResponse {
    /// The request's `Idempotency-Key`: required, at most 255 bytes.
    static func key(_ request: Request) throws -> String {
        guard let key = request.headers[.idempotencyKey].map(trimmed), !key.isEmpty else {
            throw Problem.validation("The Idempotency-Key header is required for this write (any unique string up to 255 characters).")
        }
        guard key.utf8.count <= IdempotencyStore.keyBytesMax else { throw Problem.validation("Idempotency-Key must be at most 255 characters.") }
        return key
    }

    /// `text` without leading and trailing whitespace. A key that starts and ends with a visible ASCII character (nearly
    /// every key) is returned as it is, without Foundation's character-set scan.
    static func trimmed(_ text: String) -> String {
        let visible = UInt8(ascii: "!")...UInt8(ascii: "~")
        if let first = text.utf8.first, let last = text.utf8.last, visible.contains(first), visible.contains(last) { return text }
        return text.trimmingCharacters(in: .whitespaces)
    }

    /// The response to an idempotent write's outcome, first time or replayed (the same rendering either way): a success
    /// is `status` with `json`'s body, a remembered ledger failure its problem, a record from before migration 0017 the
    /// answer it stored. A replay carries `Idempotent-Replayed: true`.
    static func response<Value, JSON: Encodable>(
        _ result: IdempotentResult<Value>, _ status: HTTPResponse.Status, _ json: (Value) -> JSON
    ) throws -> Response {
        try response(result, { _ in status }, json)
    }

    /// The same, with a success's status chosen by its value (e.g. 202 for an unlock that became a purchase request).
    static func response<Value, JSON: Encodable>(
        _ result: IdempotentResult<Value>, _ status: (Value) -> HTTPResponse.Status, _ json: (Value) -> JSON
    ) throws -> Response {
        let (code, body): (Int, String)
        switch result.outcome {
        case .succeeded(let value): (code, body) = (status(value).code, try encode(json(value)))
        case .failed(let error): (code, body) = (error.problem.status.code, try error.problem.jsonText())
        case .sentBefore(let status, let sent): (code, body) = (status, sent)
        }
        var headers: HTTPFields = [.contentType: code >= 400 ? "application/problem+json" : "application/json; charset=utf-8"]
        if result.replayed { headers[.idempotentReplayed] = "true" }
        return Response(status: HTTPResponse.Status(code: code), headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    static func encode<T: Encodable>(_ value: T) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }
}

extension HTTPField.Name {
    static let idempotentReplayed = Self("Idempotent-Replayed")!
}
