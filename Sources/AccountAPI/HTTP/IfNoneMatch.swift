import Foundation

/// The one reading of `If-None-Match` for every conditional GET (the entitlement snapshot, the sticker catalog, media):
/// `*` (any current representation), or a comma-separated list of tags, weak ones included (RFC 9110 §13.1.2 compares
/// weakly). A match answers 304.
enum IfNoneMatch {
    static func matches(_ header: String, _ etag: String) -> Bool {
        header.split(separator: ",").contains { item in
            let tag = item.trimmingCharacters(in: .whitespaces)
            return tag == "*" || tag == etag || tag == "W/" + etag
        }
    }
}
