import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore

extension TestClientProtocol {
    /// A multipart/form-data POST: each part a form field name, an optional file name, and its bytes.
    func postMultipart(_ uri: String, token: String, parts: [(name: String, fileName: String?, data: Data)]) async throws -> TestResponse {
        let boundary = "test-boundary-\(UUID().uuidString)"
        var body = ByteBuffer()
        for part in parts {
            let file = part.fileName.map { "; filename=\"\($0)\"\r\nContent-Type: image/png" } ?? ""
            body.writeString("--\(boundary)\r\nContent-Disposition: form-data; name=\"\(part.name)\"\(file)\r\n\r\n")
            body.writeBytes(part.data)
            body.writeString("\r\n")
        }
        body.writeString("--\(boundary)--\r\n")
        return try await execute(
            uri: uri, method: .post, headers: [.authorization: "Bearer \(token)", .contentType: "multipart/form-data; boundary=\(boundary)"],
            body: body)
    }

    /// Operator upload into a pack: one `file` part per file, plus optional `name` and `tags` parts.
    func uploadStickers(_ key: String, pack: String, files: [(String, Data)], name: String? = nil, tags: String? = nil) async throws -> TestResponse {
        var parts = files.map { (name: "file", fileName: Optional($0.0), data: $0.1) }
        if let name { parts.append((name: "name", fileName: nil, data: Data(name.utf8))) }
        if let tags { parts.append((name: "tags", fileName: nil, data: Data(tags.utf8))) }
        return try await postMultipart("/api/admin/stickers/pack/\(pack)/stickers", token: key, parts: parts)
    }

    /// A user's own upload: one `file` part.
    func uploadOwn(_ token: String, _ data: Data, name: String = "mine.png") async throws -> TestResponse {
        try await postMultipart("/api/stickers/upload", token: token, parts: [(name: "file", fileName: name, data: data)])
    }

    func uploadIcon(_ key: String, pack: String, _ data: Data) async throws -> TestResponse {
        try await postMultipart("/api/admin/stickers/packs/\(pack)/icon", token: key, parts: [(name: "file", fileName: "icon.png", data: data)])
    }
}

struct StickerBody: Decodable {
    let id: String; let name: String; let imageUrl: String; let thumbnailUrl: String; let width: Int; let height: Int; let fileType: String
    let tags: [String]
}
struct StickersBody: Decodable { let stickers: [StickerBody] }
