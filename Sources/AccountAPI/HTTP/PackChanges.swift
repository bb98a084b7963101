import Entitlements
import Foundation
import Hummingbird

/// A pack with some of its fields changed (the API's `PUT` and the console's form): omitted fields keep their values; a
/// changed price or plan list re-derives `isPremium` unless it is given; the result is decoded as a new pack body is
/// (the same defaults and checks), so a rename never makes a paid pack free.
enum PackChanges {
    static func applying(_ changes: [String: JSONValue], to current: StickerPack) throws -> StickerPack {
        var fields = try JSONDecoder().decode([String: JSONValue].self, from: JSONEncoder().encode(current))
        if changes["isPremium"] == nil && (changes["tokenPrice"] != nil || changes["includedInPlans"] != nil) { fields["isPremium"] = nil }
        fields.merge(changes) { _, new in new }
        return try decode(fields)
    }

    /// A pack body's fields decoded as the API decodes one.
    static func decode(_ fields: [String: JSONValue]) throws -> StickerPack {
        do {
            return try JSONDecoder().decode(StickerPack.self, from: JSONEncoder().encode(fields))
        } catch let error as DecodingError {
            throw Problem.validation(Request.describe(error))
        }
    }
}
