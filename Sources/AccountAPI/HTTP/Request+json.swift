import Foundation
import Hummingbird
import NIOCore

extension Request {
    /// Decodes a JSON body into `T`, answering bad input with clear 4xx problems: a wrong content type
    /// (415), a body over 1 MiB (413), malformed JSON, missing fields or wrong types (400).
    mutating func decodeJSON<T: Decodable>(_ type: T.Type, context: some RequestContext, emptyMeans: String? = nil) async throws -> T {
        let buffer = try await rawBody(context: context)
        // Endpoints whose body is optional treat an empty one as `emptyMeans` (e.g. "{}").
        if buffer.readableBytes == 0, let emptyMeans { return try JSONDecoder().decode(T.self, from: Data(emptyMeans.utf8)) }
        let contentType = headers[.contentType]?.lowercased() ?? ""
        guard contentType.hasPrefix("application/json") || contentType.hasPrefix("application/") && contentType.contains("+json") else {
            throw Problem(.unsupportedMediaType, code: "validation_failed", detail: "Content-Type must be application/json.")
        }
        guard buffer.readableBytes > 0 else { throw Problem.validation("The request body is empty; a JSON object is expected.") }
        do {
            return try JSONDecoder().decode(T.self, from: Data(buffer.readableBytesView))
        } catch let error as DecodingError {
            throw Problem.validation(Self.describe(error))
        } catch {
            throw Problem.validation("The request body is not valid JSON.")
        }
    }

    /// The body's exact bytes (signatures are computed over them), at most 1 MiB (413 beyond).
    mutating func rawBody(context: some RequestContext) async throws -> ByteBuffer {
        do {
            return try await collectBody(upTo: context.maxUploadSize)
        } catch is NIOTooManyBytesError {
            throw Problem(.contentTooLarge, code: "validation_failed", detail: "The request body is larger than 1 MiB.")
        }
    }

    static func describe(_ error: DecodingError) -> String {
        func path(_ keys: [any CodingKey]) -> String {
            let p = keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
            return p.isEmpty ? "the body" : "'\(p)'"
        }
        switch error {
        case .keyNotFound(let key, let ctx): return "Missing field '\((ctx.codingPath + [key]).map(\.stringValue).joined(separator: "."))'."
        case .typeMismatch(let type, let ctx): return "Field \(path(ctx.codingPath)) has the wrong type (expected \(Self.jsonName(type)))."
        case .valueNotFound(let type, let ctx): return "Field \(path(ctx.codingPath)) must not be null (expected \(Self.jsonName(type)))."
        case .dataCorrupted(let ctx):
            return ctx.codingPath.isEmpty
                ? "The request body is not valid JSON." : "Field \(path(ctx.codingPath)) is invalid: \(ctx.debugDescription)"
        @unknown default: return "The request body could not be decoded."
        }
    }

    static func jsonName(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Bool.Type: "a boolean"
        case is Int.Type, is Int64.Type, is Double.Type: "a number"
        case is [Any].Type: "an array"
        default: "an object"
        }
    }
}

/// A JSON response body with a given status (the problem type covers errors).
struct JSONResponse<T: Encodable & Sendable>: ResponseGenerator {
    var status: HTTPResponse.Status = .ok
    let value: T
    var headers: HTTPFields = [:]

    init(_ value: T, status: HTTPResponse.Status = .ok) {
        self.value = value
        self.status = status
    }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        var fields = headers
        fields[.contentType] = "application/json; charset=utf-8"
        return Response(status: status, headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: try encoder.encode(value))))
    }
}
