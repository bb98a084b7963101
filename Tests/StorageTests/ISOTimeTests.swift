import Clock
import Foundation
import Storage
import Testing

@Suite("ISO times")
struct ISOTimeTests {
    /// The hand-written form equals Foundation's for dates across eras, leap days and milliseconds.
    @Test func matchesFoundation() {
        let reference = ISO8601DateFormatter()
        reference.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        var generator = SystemRandomNumberGenerator()
        let samples: [Int64] =
            [0, 1, 999, 951_782_400_123, 1_709_164_800_999, 4_102_444_799_999, 1_800_000_000_000]
            + (0..<200).map { _ in Int64.random(in: 0...4_102_444_799_999, using: &generator) }
        for milliseconds in samples {
            let date = Date(epochMilliseconds: milliseconds)
            #expect(ISOTime.string(date) == reference.string(from: date), "\(milliseconds)")
        }
    }

    /// A date past either end of years 1–9999 (a saturated `epochMilliseconds`, NaN) is written as the nearest end, not a trap.
    @Test func datesBeyondFourDigitYearsAreClampedNotTrapped() {
        #expect(ISOTime.string(Date(epochMilliseconds: .max)) == "9999-12-31T23:59:59.999Z")
        #expect(ISOTime.string(Date(epochMilliseconds: .min)) == "0001-01-01T00:00:00.000Z")
        #expect(ISOTime.string(Date(timeIntervalSince1970: .infinity)) == "9999-12-31T23:59:59.999Z")
        #expect(ISOTime.string(Date(timeIntervalSince1970: .nan)) == "1970-01-01T00:00:00.000Z")
        #expect(ISOTime.string(Date(timeIntervalSince1970: -1)) == "1969-12-31T23:59:59.000Z")
    }
}
