import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// A content-addressed file as an HTTP response: `ETag` (the key), `Cache-Control: immutable` (the bytes of a key never
/// change; signed URLs are private), `If-None-Match` → 304, and one `Range: bytes=a-b` → 206.
enum MediaResponse {
    static func make(_ data: Data, key: String, request: Request) -> Response {
        let etag = "\"\(key)\""
        let type =
            key.hasSuffix(".png")
            ? "image/png" : key.hasSuffix(".gif") ? "image/gif" : key.hasSuffix(".webp") ? "image/webp" : "application/octet-stream"
        let signed = request.uri.queryParameters["sig"] != nil
        var headers: HTTPFields = [
            .eTag: etag, .contentType: type, .acceptRanges: "bytes",
            .cacheControl: signed ? "private, max-age=3600, immutable" : "public, max-age=31536000, immutable",
            // Bytes after an image's end (a GIF or WebP may carry some) must never run as a page.
            .contentSecurityPolicy: "default-src 'none'; sandbox",
        ]
        if let match = request.headers[.ifNoneMatch], IfNoneMatch.matches(match, etag) { return Response(status: .notModified, headers: headers) }
        if let range = request.headers[.range] {
            guard let (start, end) = parse(range, count: data.count) else {
                headers[.contentRange] = "bytes */\(data.count)"
                return Response(status: .rangeNotSatisfiable, headers: headers)
            }
            headers[.contentRange] = "bytes \(start)-\(end)/\(data.count)"
            return Response(status: .partialContent, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data[start...end])))
        }
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// One range `bytes=a-b`, `bytes=a-` or `bytes=-n` within `count` bytes; nil when it cannot be satisfied.
    static func parse(_ header: String, count: Int) -> (Int, Int)? {
        guard header.hasPrefix("bytes="), count > 0 else { return nil }
        let spec = header.dropFirst(6)
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return nil }
        let (from, to) = (spec[..<dash], spec[spec.index(after: dash)...])
        if from.isEmpty, let suffix = Int(to), suffix > 0 { return (max(0, count - suffix), count - 1) }
        guard let start = Int(from), start < count else { return nil }
        let end = to.isEmpty ? count - 1 : min(Int(to) ?? -1, count - 1)
        return end >= start ? (start, end) : nil
    }
}
