import Foundation
import Hummingbird
import MultipartKit
import NIOCore

/// `multipart/form-data` bodies, read with MultipartKit's parser.
enum Multipart {
    /// The parts of a multipart body of at most `limit` bytes (413 beyond; 415 without a boundary; 400 when unreadable).
    static func parts(_ request: inout Request, limit: Int) async throws -> [MultipartPart] {
        let type = request.headers[.contentType] ?? ""
        guard type.lowercased().hasPrefix("multipart/form-data"), let boundary = boundary(type) else {
            throw Problem(.unsupportedMediaType, code: "validation_failed", detail: "Content-Type must be multipart/form-data with a boundary.")
        }
        let body: ByteBuffer
        do { body = try await request.collectBody(upTo: limit) } catch is NIOTooManyBytesError {
            throw Problem(.contentTooLarge, code: "validation_failed", detail: "The request body is larger than \(limit / 1024) KiB.")
        }
        var parts: [MultipartPart] = []
        var headers: [(String, String)] = []
        var current = ByteBuffer()
        let parser = MultipartParser(boundary: boundary)
        parser.onHeader = { headers.append(($0, $1)) }
        parser.onBody = { current.writeBuffer(&$0) }
        parser.onPartComplete = {
            parts.append(MultipartPart(headers: .init(headers), body: current))
            (headers, current) = ([], ByteBuffer())
        }
        do { try parser.execute(body) } catch { throw Problem.validation("The multipart body could not be read.") }
        guard parts.count <= 64 else { throw Problem.validation("At most 64 parts per request.") }
        return parts
    }

    static func boundary(_ contentType: String) -> String? {
        let parameters = contentType.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        guard let raw = parameters.first(where: { $0.lowercased().hasPrefix("boundary=") }) else { return nil }
        let value = String(raw.dropFirst("boundary=".count)).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
        return (1...70).contains(value.count) ? value : nil
    }

    /// The file name of a part without its extension (`Party Hat.png` → `Party Hat`).
    static func fileStem(_ part: MultipartPart) -> String? {
        guard let disposition = part.headers.first(name: "Content-Disposition"), let range = disposition.range(of: "filename=\"") else { return nil }
        let name = disposition[range.upperBound...].prefix { $0 != "\"" }
        let stem = name.split(separator: ".").dropLast().joined(separator: ".")
        return stem.isEmpty ? (name.isEmpty ? nil : String(name)) : stem
    }

    static func text(_ parts: [MultipartPart], _ name: String) -> String? {
        parts.first { $0.name == name }.map { String(decoding: $0.body.readableBytesView, as: UTF8.self) }
    }
}
