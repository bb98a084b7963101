import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// An RFC 9457 problem: every error the service answers is one of these, as `application/problem+json`
/// `{type, title, status, detail, code}` plus optional extension members.
struct Problem: Error, HTTPResponseError, Sendable {
    let status: HTTPResponse.Status
    /// Stable machine code (DESIGN.md), e.g. `invalid_credentials`.
    let code: String
    /// Human-readable explanation specific to this occurrence.
    let detail: String
    /// Extra members (e.g. `availableTokens`).
    var extensions: [String: ProblemValue] = [:]
    /// Headers to add (e.g. `Retry-After`).
    var headers: HTTPFields = [:]

    /// Details quote input (an id, a path, a value); they are cut at this many characters so an answer never
    /// echoes a huge input back.
    static let maxDetailCharacters = 300

    init(_ status: HTTPResponse.Status, code: String, detail: String) {
        self.status = status
        self.code = code
        self.detail = detail.count > Self.maxDetailCharacters ? detail.prefix(Self.maxDetailCharacters) + "…" : detail
    }

    func retryAfter(seconds: Int) -> Problem {
        var copy = self
        copy.headers[.retryAfter] = String(max(1, seconds))
        return copy
    }

    func with(_ key: String, _ value: ProblemValue) -> Problem {
        var copy = self
        copy.extensions[key] = value
        return copy
    }

    var body: [String: ProblemValue] {
        var members = extensions
        members["type"] = .string("https://account-service.dev/problems/\(code.replacingOccurrences(of: "_", with: "-"))")
        members["title"] = .string(status.reasonPhrase)
        members["status"] = .int(status.code)
        members["detail"] = .string(detail)
        members["code"] = .string(code)
        return members
    }

    /// The problem body as JSON text (sorted keys), as stored for idempotent replays.
    func jsonText() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return String(decoding: try encoder.encode(body), as: UTF8.self)
    }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = try encoder.encode(body)
        var fields = headers
        fields[.contentType] = "application/problem+json"
        return Response(status: status, headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

/// JSON values that problem extension members can hold.
enum ProblemValue: Encodable, Sendable, Equatable {
    case string(String)
    case int(Int)
    case strings([String])

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let s): try container.encode(s)
        case .int(let i): try container.encode(i)
        case .strings(let s): try container.encode(s)
        }
    }
}

extension Problem {
    static func validation(_ detail: String) -> Problem { Problem(.badRequest, code: "validation_failed", detail: detail) }
    static func notFound(_ detail: String = "No such resource.") -> Problem { Problem(.notFound, code: "not_found", detail: detail) }
    static func unauthorized(_ detail: String = "A valid bearer token is required.") -> Problem {
        var p = Problem(.unauthorized, code: "unauthorized", detail: detail)
        p.headers[.wwwAuthenticate] = "Bearer"
        return p
    }
    static func forbidden(_ detail: String) -> Problem { Problem(.forbidden, code: "forbidden", detail: detail) }
    static func unavailable(_ detail: String, retryAfterSeconds: Int = 5) -> Problem {
        Problem(.serviceUnavailable, code: "unavailable", detail: detail).retryAfter(seconds: retryAfterSeconds)
    }
    static let internalError = Problem(
        .internalServerError, code: "internal_error", detail: "An unexpected error occurred; it has been logged with the request id.")
}
