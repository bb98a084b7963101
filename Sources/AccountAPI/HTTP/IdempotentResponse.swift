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
        guard let key = request.headers[.idempotencyKey]?.trimmingCharacters(in: .whitespaces), !key.isEmpty else {
            throw Problem.validation("The Idempotency-Key header is required for this write (any unique string up to 255 characters).")
        }
        guard key.utf8.count <= IdempotencyStore.keyBytesMax else { throw Problem.validation("Idempotency-Key must be at most 255 characters.") }
        return key
    }

    /// Stored answers are the JSON sent: `json` renders a success, a remembered ledger failure is its problem.
    static func format<Value, JSON: Encodable & SendableMetatype>(_ json: @escaping @Sendable (Value) -> JSON) -> AnswerFormat<Value> {
        AnswerFormat(
            encode: { try encode(json($0)) }, failure: { error in (Int(error.problem.status.code), (try? error.problem.jsonText()) ?? "{}") })
    }

    static let ledgerResult = format(LedgerResultJSON.init)
    static let hold = format(HoldJSON.init)
    static let unlock = format(UnlockJSON.init)

    static func response(_ answer: IdempotentAnswer) -> Response {
        let isProblem = answer.status >= 400
        var headers: HTTPFields = [.contentType: isProblem ? "application/problem+json" : "application/json; charset=utf-8"]
        if answer.replayed { headers[.idempotentReplayed] = "true" }
        return Response(status: HTTPResponse.Status(code: answer.status), headers: headers, body: .init(byteBuffer: ByteBuffer(string: answer.body)))
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
