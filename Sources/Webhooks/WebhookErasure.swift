import Foundation
import Storage

extension WebhookService {
    /// In an account's erasure transaction: the address in its `user.created` and `user.verified` deliveries becomes
    /// `null` (whatever the address was then: an address changed since is in them too). The deliveries keep their type,
    /// time and user id, so what was sent stays traceable; a retry sends the redacted body. Such events still in the
    /// outbox are dropped: a fan-out pass may have rendered one already, and its claim then finds it gone and makes no
    /// delivery. Deliveries made before they carried their user (migration 0036) are not found.
    public static func accountErased(_ tx: any SQLExecutor, userID: String) async throws {
        let types = "('user.created', 'user.verified')"
        let delivered = try await tx.query(
            "SELECT id, body FROM webhook_deliveries WHERE user_id = ? AND event_type IN \(types)", [userID])
        for row in delivered {
            try await tx.query("UPDATE webhook_deliveries SET body = ? WHERE id = ?", [redacted(try row.string("body")), try row.string("id")])
        }
        try await tx.query("DELETE FROM outbox_events WHERE user_id = ? AND type IN \(types)", [userID])
    }

    /// `text` with the value of every `"email"` member that is a string (as ``Events/EventValue`` writes it) set to null.
    public static func redacted(_ text: String) -> String {
        text.replacing(/"email":"(?:[^"\\]|\\.)*"/, with: #""email":null"#)
    }
}
