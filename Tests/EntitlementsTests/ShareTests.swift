import Testing

@testable import Billing

/// Shares of external amounts: exact where the plain formula fits, and no trap where it would overflow (a signed Stripe
/// refund with `amount` 92,233,720,368,548 or more stopped the process in `refunded * 100_000 / amount`).
@Suite("Shares")
struct ShareTests {
    @Test func sharesOfHugeAmountsNeitherTrapNorLeaveTheirRange() {
        #expect(Share.of(.max, in: .max) == 100_000)
        #expect(Share.of(92_233_720_368_548, in: 92_233_720_368_548) == 100_000)
        #expect(Share.of(2_000_000_000_000_000_000, in: 5_000_000_000_000_000_000) == 40_000)
        #expect(Share.of(.max / 2, in: .max) == 49_999)
        #expect(Share.of(.max, in: 1) == 100_000 && Share.of(-7, in: 10) == 0 && Share.of(.min, in: .max) == 0)
        #expect(Share.of(5, in: 0) == 0 && Share.of(5, in: -3) == 0)
        #expect(Share.apply(100_000, to: .max) == .max && Share.apply(.max, to: .max) == .max)
        #expect(Share.apply(50_000, to: .max) == .max / 2 && Share.apply(-1, to: 25) == 0 && Share.apply(40_000, to: -25) == 0)
    }

    @Test func sharesAgreeWithThePlainFormulaWhereItFits() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<10_000 {
            let total = Int64.random(in: 1...9_000_000_000_000, using: &generator)
            let part = Int64.random(in: 0...total, using: &generator)
            let share = part * 100_000 / total
            #expect(Share.of(part, in: total) == share)
            let amount = Int64.random(in: 0...9_000_000_000_000, using: &generator)
            #expect(Share.apply(share, to: amount) == amount * share / 100_000)
        }
    }
}
