import Foundation
import Hummingbird
import NIOCore

/// `multipart/form-data` request bodies, read by ``MultipartFormData`` (strict, bounded, never traps).
enum Multipart {
    typealias Part = MultipartFormData.Part

    /// The parts of a multipart body of at most `limit` bytes (413 beyond; 415 without a boundary; 400 when unreadable).
    static func parts(_ request: inout Request, context: AppRequestContext, limit: Int) async throws -> [Part] {
        let type = request.headers[.contentType] ?? ""
        guard type.lowercased().hasPrefix("multipart/form-data"), let boundary = boundary(type) else {
            throw Problem(.unsupportedMediaType, code: "validation_failed", detail: "Content-Type must be multipart/form-data with a boundary.")
        }
        let body: ByteBuffer
        do { body = try await request.readBody(upTo: limit, context: context) } catch is NIOTooManyBytesError {
            throw Problem(.contentTooLarge, code: "validation_failed", detail: "The request body is larger than \(limit / 1024) KiB.")
        }
        do { return try MultipartFormData.parse(Array(body.readableBytesView), boundary: boundary) } catch {
            throw Problem.validation("The multipart body could not be read: \(error.detail)")
        }
    }

    /// The `boundary` parameter of a Content-Type (quoted or not), when it is 1–70 characters.
    static func boundary(_ contentType: String) -> String? {
        guard let value = Part.parameter("boundary", in: contentType) else { return nil }
        return (1...70).contains(value.utf8.count) ? value : nil
    }

    /// The file name of a part without its extension (`Party Hat.png` → `Party Hat`).
    static func fileStem(_ part: Part) -> String? {
        guard let name = part.filename, !name.isEmpty else { return nil }
        let stem = name.split(separator: ".").dropLast().joined(separator: ".")
        return stem.isEmpty ? name : stem
    }

    static func text(_ parts: [Part], _ name: String) -> String? {
        parts.first { $0.name == name }.map { String(decoding: $0.body, as: UTF8.self) }
    }
}
