/// A content rating on the App Store's age scale: sticker packs and priced actions may carry one, a family profile may
/// carry the highest it may see (set by the owner). One rule: content is open to a profile when its rating is at most the
/// profile's maximum; a profile without a maximum (the owner's, or one the owner left open) sees everything.
public enum ContentRating: String, Sendable, Codable, CaseIterable, Comparable {
    case all = "all"
    case age9 = "9+"
    case age13 = "13+"
    case age16 = "16+"
    case age18 = "18+"

    public static func < (lhs: ContentRating, rhs: ContentRating) -> Bool { lhs.rank < rhs.rank }

    var rank: Int { Self.allCases.firstIndex(of: self) ?? Self.allCases.count }

    /// Whether content rated `rating` is open to a profile whose maximum is `maximum` (nil: no maximum).
    public static func allows(_ rating: ContentRating, under maximum: ContentRating?) -> Bool {
        guard let maximum else { return true }
        return rating <= maximum
    }

    /// The scale as apps and docs show it.
    public static let scale = allCases.map(\.rawValue).joined(separator: ", ")

    /// A stored or given rating; an unknown one is nil.
    public init?(text: String?) {
        guard let text, let rating = ContentRating(rawValue: text) else { return nil }
        self = rating
    }
}

/// Who looks at sticker content: the acting profile (nil: none) and its maximum content rating. Packs follow their
/// rating (``ContentRating/allows(_:under:)``); the account's own uploads carry none, so a profile with a maximum sees
/// only the uploads it made itself, and a profile without one (the owner's, or one left open) sees them all.
public struct ContentViewer: Sendable, Equatable {
    public let profileID: String?
    public let maxRating: ContentRating?

    public init(profileID: String?, maxRating: ContentRating?) { (self.profileID, self.maxRating) = (profileID, maxRating) }

    /// Whether this viewer may see `sticker` as far as uploads go (a catalog pack's rules apply elsewhere).
    public func sees(_ sticker: Sticker) -> Bool {
        sticker.packID != Sticker.customPackID || maxRating == nil || (profileID != nil && sticker.ownerProfileID == profileID)
    }
}
