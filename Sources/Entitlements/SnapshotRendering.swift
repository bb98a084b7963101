import Crypto
import Foundation
import Storage
import Synchronization

/// Whose entitlement snapshot one statement reads: SQL yielding at most one row whose `id` column is the user and whose
/// `selected_profile_id` column is the session's selected profile (or NULL). The session lookup of a bearer token fits
/// here, so authenticating and reading the snapshot take one round trip.
public struct SnapshotSubject: Sendable {
    let sql: String
    let binds: [SQLValue]
    let withProfile: Bool

    /// `withProfile`: whether the snapshot carries the selected (or default) profile's permissions.
    public init(sql: String, binds: [SQLValue], withProfile: Bool) {
        self.sql = sql
        self.binds = binds
        self.withProfile = withProfile
    }

    /// A user by id: without a profile (services asking about a user), or with `selectedProfileID`'s (the default
    /// profile when it is nil or gone).
    public static func user(_ id: String, withProfile: Bool = false, selectedProfileID: String? = nil) -> SnapshotSubject {
        SnapshotSubject(
            sql: "SELECT CAST(? AS TEXT) AS id, CAST(? AS TEXT) AS selected_profile_id", binds: [.text(id), selectedProfileID.sqlValue],
            withProfile: withProfile)
    }
}

/// A snapshot as it is sent: the value, its JSON (sorted keys) and a strong ETag over exactly those bytes.
public struct RenderedSnapshot: Sendable {
    public let snapshot: EntitlementSnapshot
    public let body: [UInt8]
    public let etag: String

    init(_ snapshot: EntitlementSnapshot) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        self.snapshot = snapshot
        body = Array(try encoder.encode(snapshot))
        etag = "\"" + hexString(SHA256.hash(data: body).prefix(16)) + "\""
    }
}

/// The last rendering per subject, with the values it was rendered from. A rendering is reused only when the values
/// just read are all equal to the stored ones, so this never answers with old data: it only saves building, encoding
/// and hashing the same JSON again. At most `capacity` subjects are kept; when full, the store starts over.
final class SnapshotRenderings: Sendable {
    private struct Entry {
        let read: [SQLValue]
        let rendered: RenderedSnapshot
    }
    static let capacity = 10_000
    private let entries = Mutex<[String: Entry]>([:])

    func lookup(_ key: String, read: [SQLValue]) -> RenderedSnapshot? {
        entries.withLock { entries in
            guard let entry = entries[key], entry.read == read else { return nil }
            return entry.rendered
        }
    }

    func store(_ key: String, read: [SQLValue], rendered: RenderedSnapshot) {
        entries.withLock { entries in
            if entries.count >= Self.capacity, entries[key] == nil { entries.removeAll(keepingCapacity: true) }
            entries[key] = Entry(read: read, rendered: rendered)
        }
    }

    var count: Int { entries.withLock { $0.count } }
}
