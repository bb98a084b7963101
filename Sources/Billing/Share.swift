/// Shares in thousandths of a percent (100,000 = all), as Apple's `revocationPercentage` and `consumptionPercentage` and
/// the refunds use them, computed in double width. The parts come from external payloads (a Stripe charge's `amount`
/// can be anything up to Int64.max), where `part * 100_000` overflowed and stopped the process.
enum Share {
    static let all: Int64 = 100_000

    /// `part` of `total` as a share, rounded down: 0...100,000 (`part` clamped to 0...total); 0 when `total` is not
    /// positive.
    static func of(_ part: Int64, in total: Int64) -> Int64 {
        guard total > 0 else { return 0 }
        return scaled(min(max(part, 0), total), by: all, over: total)
    }

    /// `share` (clamped to 0...100,000) of `amount` (at least 0), rounded down.
    static func apply(_ share: Int64, to amount: Int64) -> Int64 {
        scaled(max(amount, 0), by: min(max(share, 0), all), over: all)
    }

    /// `value * factor / divisor` without an intermediate overflow. Callers keep `factor <= divisor` or
    /// `value <= divisor`, all three non-negative and the divisor positive, so the quotient fits.
    private static func scaled(_ value: Int64, by factor: Int64, over divisor: Int64) -> Int64 {
        divisor.dividingFullWidth(value.multipliedFullWidth(by: factor)).quotient
    }
}
