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
        // MultipartKit 4.7.1 indexes a 128-entry table with each header-name byte and traps on a byte ≥ 0x80 (one request
        // would stop the server): header names are checked here first.
        guard headerNamesAreASCII(Array(body.readableBytesView), boundary: Array(boundary.utf8)) else {
            throw Problem.validation("The multipart body could not be read (a part header name is not ASCII).")
        }
        do { try parser.execute(body) } catch { throw Problem.validation("The multipart body could not be read.") }
        guard parts.count <= 64 else { throw Problem.validation("At most 64 parts per request.") }
        return parts
    }

    /// True when every part header name (the text before ':' on each line after a boundary, up to the blank line) is
    /// visible ASCII.
    static func headerNamesAreASCII(_ body: [UInt8], boundary: [UInt8]) -> Bool {
        let delimiter: [UInt8] = Array("--".utf8) + boundary
        var index = 0
        while let found = firstRange(of: delimiter, in: body, from: index) {
            var cursor = found + delimiter.count
            // Skip to the end of the boundary line.
            while cursor < body.count && body[cursor] != UInt8(ascii: "\n") { cursor += 1 }
            cursor += 1
            // Header lines until an empty one.
            while cursor < body.count {
                var end = cursor
                while end < body.count && body[end] != UInt8(ascii: "\n") { end += 1 }
                let line = body[cursor..<end].last == UInt8(ascii: "\r") ? body[cursor..<(end - 1)] : body[cursor..<end]
                if line.isEmpty { break }
                for byte in line.prefix(while: { $0 != UInt8(ascii: ":") }) where !(0x20...0x7e).contains(byte) && byte != 0x09 { return false }
                cursor = end + 1
            }
            index = max(cursor, found + 1)
        }
        return true
    }

    static func firstRange(of needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
        guard !needle.isEmpty, haystack.count >= needle.count, start <= haystack.count - needle.count else { return nil }
        var position = start
        while position <= haystack.count - needle.count {
            if haystack[position] == needle[0] && haystack[position..<(position + needle.count)].elementsEqual(needle) { return position }
            position += 1
        }
        return nil
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
