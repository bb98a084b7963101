import Clock
import Foundation
import Storage

/// Dates on the wire: ISO 8601 UTC with milliseconds; parsed with or without fractional seconds.
enum ISODate {
    static func string(_ date: Date) -> String { ISOTime.string(date) }

    static func parse(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }

    /// A request field that must be a date-time, if given.
    static func parse(_ text: String?, field: String) throws -> Date? {
        guard let text else { return nil }
        guard let date = parse(text) else { throw Problem.validation("\(field) must be an ISO-8601 date-time.") }
        return date
    }
}
