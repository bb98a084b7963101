/// The one range every date a payment provider sends must lie in: 1970 to 2100. Dates are stored, compared and written
/// back as times. One near Int64's end trapped on its way to an answer (an Apple `purchaseDate` of Int64.max), and a
/// Stripe `created` there, stored as the user's last event time, made every later event of that user stale (a
/// cancellation or a refund would never have applied).
enum ProviderDates {
    /// 2100-01-01T00:00:00Z, in seconds since 1970.
    static let latestSeconds: Int64 = 4_102_444_800
    /// Apple's dates, in milliseconds.
    static let milliseconds: ClosedRange<Int64> = 0...latestSeconds * 1_000
    /// Stripe's dates, in seconds.
    static let seconds: ClosedRange<Int64> = 0...latestSeconds

    /// The name of the first date outside `range`, if any (absent dates pass).
    static func firstOutside(_ range: ClosedRange<Int64>, _ named: [(String, Int64?)]) -> String? {
        for case let (name, value?) in named where !range.contains(value) { return name }
        return nil
    }
}
