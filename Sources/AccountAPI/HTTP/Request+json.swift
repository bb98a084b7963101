import Entitlements
import Foundation
import Hummingbird
import Ledger
import NIOCore
import SafeJSON

extension Request {
    /// Decodes a JSON body into `T`, answering bad input with clear 4xx problems: a wrong content type
    /// (415), a body over 1 MiB (413), malformed JSON, missing fields or wrong types (400).
    mutating func decodeJSON<T: Decodable>(
        _ type: T.Type, context: AppRequestContext, emptyMeans: String? = nil, limitBytes: Int? = nil
    ) async throws -> T {
        let buffer = try await rawBody(context: context, limitBytes: limitBytes)
        // Endpoints whose body is optional treat an empty one as `emptyMeans` (e.g. "{}").
        if buffer.readableBytes == 0, let emptyMeans { return try JSONDecoder().decode(T.self, from: Data(emptyMeans.utf8)) }
        let contentType = headers[.contentType]?.lowercased() ?? ""
        guard contentType.hasPrefix("application/json") || contentType.hasPrefix("application/") && contentType.contains("+json") else {
            throw Problem(.unsupportedMediaType, code: "validation_failed", detail: "Content-Type must be application/json.")
        }
        guard buffer.readableBytes > 0 else { throw Problem.validation("The request body is empty; a JSON object is expected.") }
        do {
            return try UntrustedJSON.decode(T.self, from: Data(buffer.readableBytesView))
        } catch let refusal as UntrustedJSON.Refusal {
            throw Problem.validation(refusal.description)
        } catch let error as DecodingError {
            throw Problem.validation(Self.describe(error, body: Data(buffer.readableBytesView)))
        } catch {
            throw Problem.validation("The request body is not valid JSON.")
        }
    }

    /// The body's exact bytes (signatures are computed over them), at most 1 MiB or the route's smaller `limitBytes` (413
    /// beyond).
    mutating func rawBody(context: AppRequestContext, limitBytes: Int? = nil) async throws -> ByteBuffer {
        let limit = min(limitBytes ?? context.maxUploadSize, context.maxUploadSize)
        do {
            return try await readBody(upTo: limit, context: context)
        } catch is NIOTooManyBytesError {
            let size = limit >= 1 << 20 ? "\(limit >> 20) MiB" : "\(limit >> 10) KiB"
            throw Problem(.contentTooLarge, code: "validation_failed", detail: "The request body is larger than \(size).")
        }
    }

    /// Like ``describe(_:)``, for a failure with the body at hand: Foundation reports a number that does not fit its field
    /// (`1.5` or `1e30` for an integer) as "not valid JSON" without a path; when the body is valid JSON, the first such
    /// number outside `metadata` is named instead.
    static func describe(_ error: DecodingError, body: Data) -> String {
        guard case .dataCorrupted(let ctx) = error, ctx.codingPath.isEmpty,
            let json = try? JSONSerialization.jsonObject(with: body, options: [.fragmentsAllowed])
        else { return describe(error) }
        guard let (path, number) = unfitNumber(in: json, path: "") else { return describe(error) }
        return "Field '\(path)' must be a whole number in range (got \(number))."
    }

    /// The first number (by path) that is not a whole number within Int64, outside `metadata` (which keeps any number).
    static func unfitNumber(in value: Any, path: String) -> (String, String)? {
        switch value {
        case let object as [String: Any]:
            for (key, member) in object.sorted(by: { $0.key < $1.key }) where !(path.isEmpty && key == "metadata") {
                if let found = unfitNumber(in: member, path: path.isEmpty ? key : "\(path).\(key)") { return found }
            }
        case let array as [Any]:
            for (index, element) in array.enumerated() {
                if let found = unfitNumber(in: element, path: "\(path)[\(index)]") { return found }
            }
        case let number as NSNumber:
            let double = number.doubleValue
            if double.rounded() != double || abs(double) >= 9.2e18 { return (path, number.stringValue) }
        default: break
        }
        return nil
    }

    /// A decoding failure as a sentence naming the JSON field (`previewStickers[2]`, `metadata.kind`) and what it must be.
    static func describe(_ error: DecodingError) -> String {
        func path(_ keys: [any CodingKey]) -> String {
            keys.reduce(into: "") { text, key in
                if let index = key.intValue { text += "[\(index)]" } else { text += (text.isEmpty ? "" : ".") + key.stringValue }
            }
        }
        switch error {
        case .keyNotFound(let key, let ctx): return "Missing field '\(path(ctx.codingPath + [key]))'."
        case .typeMismatch(let type, let ctx):
            if ctx.codingPath.isEmpty { return "The request body must be a JSON object." }
            return "Field '\(path(ctx.codingPath))' has the wrong type (expected \(Self.jsonName(type)))."
        case .valueNotFound(let type, let ctx):
            if ctx.codingPath.isEmpty { return "The request body must be a JSON object." }
            return "Field '\(path(ctx.codingPath))' must not be null (expected \(Self.jsonName(type)))."
        case .dataCorrupted(let ctx):
            guard !ctx.codingPath.isEmpty else { return "The request body is not valid JSON." }
            return "Field '\(path(ctx.codingPath))' \(Self.allowedValues(ctx.debugDescription) ?? "is invalid: " + ctx.debugDescription)"
        @unknown default: return "The request body could not be decoded."
        }
    }

    /// The enumerations request bodies decode, by type name: Foundation reports a bad value as "Cannot initialize Bucket
    /// from invalid String value gold", which is rewritten to name the allowed values instead of a Swift type.
    static let enumerations: [String: [String]] = [
        "Bucket": Bucket.allCases.map(\.rawValue), "ContentRating": ContentRating.allCases.map(\.rawValue),
    ]

    static func allowedValues(_ debugDescription: String) -> String? {
        guard let match = debugDescription.firstMatch(of: /^Cannot initialize (\w+) from invalid \w+ value (.*)$/) else { return nil }
        let given = String(match.output.2).prefix(40)
        guard let allowed = enumerations[String(match.output.1)] else { return "has a value that is not allowed ('\(given)')." }
        return "must be one of \(allowed.joined(separator: ", ")) (got '\(given)')."
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
