import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Times on the wire: ISO 8601, UTC, with milliseconds (`2026-11-24T16:38:35.123Z`). Written by hand from `gmtime_r`:
/// Foundation's ISO8601DateFormatter costs tens of microseconds a call on Linux, and every event and answer carries times.
public enum ISOTime {
    /// Years 0001 to 9999, in milliseconds since 1970: a date outside is written as the nearest end (a stored date can
    /// come from outside, e.g. a saturated `epochMilliseconds`, and converting it unchecked trapped).
    static let representable: ClosedRange<Double> = -62_135_596_800_000...253_402_300_799_999

    public static func string(_ date: Date) -> String {
        let raw = (date.timeIntervalSince1970 * 1000).rounded()
        let milliseconds = Int64(raw.isNaN ? 0 : min(max(raw, representable.lowerBound), representable.upperBound))
        var seconds = time_t(milliseconds >= 0 ? milliseconds / 1000 : (milliseconds - 999) / 1000)
        let fraction = Int(milliseconds - Int64(seconds) * 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ value: Int, _ width: Int) -> String {
            let text = String(value)
            return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
        }
        return
            "\(pad(Int(parts.tm_year) + 1900, 4))-\(pad(Int(parts.tm_mon) + 1, 2))-\(pad(Int(parts.tm_mday), 2))T\(pad(Int(parts.tm_hour), 2)):\(pad(Int(parts.tm_min), 2)):\(pad(Int(parts.tm_sec), 2)).\(pad(fraction, 3))Z"
    }
}
