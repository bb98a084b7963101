/// A strict `multipart/form-data` reader (RFC 7578 over RFC 2046), written here instead of a third-party parser: it is
/// the first code to see an upload's bytes, so it must refuse what it does not understand rather than trap on it.
///
/// One definition of a line end: CRLF. A bare CR or LF in a part's headers, a folded header line, a header name outside
/// RFC 9110's token characters, a missing close delimiter, or more than ``Limits`` allow is ``MultipartError`` (a 400).
/// Indexing is bounds-checked against the buffer on every step; nothing here can trap on input.
struct MultipartFormData {
    struct Part: Equatable {
        /// Header names lowercased, values as sent (UTF-8, invalid sequences replaced).
        let headers: [(name: String, value: String)]
        let body: [UInt8]

        static func == (a: Part, b: Part) -> Bool {
            a.body == b.body && a.headers.map(\.name) == b.headers.map(\.name) && a.headers.map(\.value) == b.headers.map(\.value)
        }

        func header(_ name: String) -> String? { headers.first { $0.name == name.lowercased() }?.value }

        /// The `name` parameter of `Content-Disposition: form-data`.
        var name: String? { header("content-disposition").flatMap { Self.parameter("name", in: $0) } }
        /// The `filename` parameter, if any.
        var filename: String? { header("content-disposition").flatMap { Self.parameter("filename", in: $0) } }

        /// A quoted or plain parameter of a header value (`name="file"`, `name=file`).
        static func parameter(_ key: String, in value: String) -> String? {
            for piece in value.split(separator: ";").dropFirst() {
                let trimmed = piece.trimmingPrefix(while: { $0 == " " || $0 == "\t" })
                guard let equals = trimmed.firstIndex(of: "="), trimmed[..<equals].lowercased() == key else { continue }
                let raw = trimmed[trimmed.index(after: equals)...]
                if raw.first == "\"" {
                    return String(raw.dropFirst().prefix { $0 != "\"" })
                }
                return String(raw.prefix { $0 != " " && $0 != "\t" })
            }
            return nil
        }
    }

    struct Limits {
        var partsMax = 64
        var headersPerPartMax = 16
        var headerBytesPerPartMax = 8 * 1024
    }

    /// Parses `body` with `boundary` (1–70 characters, as RFC 2046 allows).
    static func parse(_ body: [UInt8], boundary: String, limits: Limits = Limits()) throws(MultipartError) -> [Part] {
        let boundaryBytes = Array(boundary.utf8)
        guard (1...70).contains(boundaryBytes.count), boundaryBytes.allSatisfy({ (0x20...0x7e).contains($0) }) else {
            throw .init("The boundary must be 1 to 70 visible ASCII characters.")
        }
        // Every delimiter is CRLF "--" boundary; the body's first one may stand at its very start.
        let delimiter: [UInt8] = [0x0d, 0x0a, 0x2d, 0x2d] + boundaryBytes
        var cursor: Int
        if body.starts(with: delimiter.dropFirst(2)) {
            cursor = delimiter.count - 2
        } else if let first = find(delimiter, in: body, from: 0) {
            cursor = first + delimiter.count
        } else {
            throw .init("The body has no boundary line.")
        }
        var parts: [Part] = []
        while true {
            // After a delimiter: "--" closes the body; otherwise optional padding (space, tab) and CRLF.
            if body.count - cursor >= 2, body[cursor] == 0x2d, body[cursor + 1] == 0x2d { return parts }
            while cursor < body.count, body[cursor] == 0x20 || body[cursor] == 0x09 { cursor += 1 }
            guard body.count - cursor >= 2, body[cursor] == 0x0d, body[cursor + 1] == 0x0a else {
                throw .init("A boundary line must end with CRLF.")
            }
            cursor += 2
            guard parts.count < limits.partsMax else { throw .init("At most \(limits.partsMax) parts per request.") }
            let (headers, bodyStart) = try readHeaders(body, from: cursor, limits: limits)
            guard let end = find(delimiter, in: body, from: bodyStart) else { throw .init("The body ends before its closing boundary.") }
            parts.append(Part(headers: headers, body: Array(body[bodyStart..<end])))
            cursor = end + delimiter.count
        }
    }

    /// The header lines of one part from `start` through the empty line; returns them and where the part's body starts.
    private static func readHeaders(_ body: [UInt8], from start: Int, limits: Limits) throws(MultipartError) -> ([(name: String, value: String)], Int)
    {
        var headers: [(name: String, value: String)] = []
        var cursor = start
        while true {
            guard cursor - start <= limits.headerBytesPerPartMax else { throw .init("A part's headers are larger than 8 KiB.") }
            var end = cursor
            while end < body.count, body[end] != 0x0d, body[end] != 0x0a { end += 1 }
            guard body.count - end >= 2, body[end] == 0x0d, body[end + 1] == 0x0a else {
                throw .init("A part's header lines must end with CRLF (no bare CR or LF).")
            }
            if end == cursor { return (headers, end + 2) }
            guard headers.count < limits.headersPerPartMax else { throw .init("At most \(limits.headersPerPartMax) headers per part.") }
            headers.append(try header(body[cursor..<end]))
            cursor = end + 2
        }
    }

    /// One `name: value` line (no folding; the name a token).
    private static func header(_ line: ArraySlice<UInt8>) throws(MultipartError) -> (name: String, value: String) {
        guard let colon = line.firstIndex(of: 0x3a), colon > line.startIndex else { throw .init("A part header line has no name.") }
        let name = line[line.startIndex..<colon]
        guard name.allSatisfy(isTokenByte) else { throw .init("A part header name may hold only letters, digits and !#$%&'*+-.^_`|~.") }
        let value = line[(colon + 1)...].drop { $0 == 0x20 || $0 == 0x09 }
        guard value.allSatisfy({ $0 == 0x09 || $0 >= 0x20 && $0 != 0x7f }) else { throw .init("A part header value holds a control character.") }
        return (String(decoding: name, as: UTF8.self).lowercased(), String(decoding: value, as: UTF8.self))
    }

    /// RFC 9110 `tchar`.
    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x30...0x39, 0x41...0x5a, 0x61...0x7a: true
        case 0x21, 0x23, 0x24, 0x25, 0x26, 0x27, 0x2a, 0x2b, 0x2d, 0x2e, 0x5e, 0x5f, 0x60, 0x7c, 0x7e: true
        default: false
        }
    }

    /// The first index at or after `start` where `needle` begins in `haystack`.
    static func find(_ needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
        guard let first = needle.first, start >= 0, haystack.count >= needle.count else { return nil }
        var position = start
        let last = haystack.count - needle.count
        while position <= last {
            if haystack[position] == first, haystack[position..<(position + needle.count)].elementsEqual(needle) { return position }
            position += 1
        }
        return nil
    }
}

/// Why a multipart body was refused (the `detail` of its 400).
struct MultipartError: Error, Equatable {
    let detail: String
    init(_ detail: String) { self.detail = detail }
}
