import Clock
import Foundation
import TestSupport
import Testing

@testable import Ledger

/// The hand-written paths of the spend's hot path must give exactly what the slow ones gave: stored idempotency records
/// are compared with `requestJSON` as text (by PostgreSQL too), and ids must stay version-4 UUIDs in the same form.
@Suite("Fast encodings", .cpuBound)
struct FastEncodingTests {
    static let keys = [
        "amount", "endpoint", "userId", "userid", "UserId", "reason", "Zeta", "alpha", "a1", "a2", "a10", "é", "", "metadata", "holdId",
    ]
    static let values = [
        "", "5", "\"spend\"", "plain words", "slash/", "back\\slash", "quote\"", "tab\t", "new\nline", "\u{0}", "\u{7F}", "é", "日本",
        "👍🏽", "\u{2028}", "{\"a\":1}", "-12", "Z", "~!@#$%^&*()_+`-=[]{}|;:',.<>?",
    ]

    @Test func requestJSONIsFoundationsTextForAnyFields() throws {
        var g = SeededGenerator(state: 34)
        var plain = 0
        for _ in 0..<5_000 {
            var fields: [String: String] = [:]
            for _ in 0..<Int.random(in: 0...6, using: &g) {
                let key = Self.keys.randomElement(using: &g) ?? "k"
                fields[key] = (0..<Int.random(in: 0...3, using: &g)).map { _ in Self.values.randomElement(using: &g) ?? "" }.joined()
            }
            let fast = try IdempotencyStore.requestJSON(fields)
            #expect(fast == (try IdempotencyStore.foundationRequestJSON(fields)), "\(fields)")
            if IdempotencyStore.plainRequestJSON(fields) != nil { plain += 1 }
        }
        // Both branches ran: the comparison above covers the direct writer, not only the fallback.
        #expect(plain > 500 && plain < 4_500, "plain: \(plain)")
        let spend = ["endpoint": "\"spend\"", "amount": "5", "userId": "\"u-1\"", "reason": "\"generation\""]
        #expect(IdempotencyStore.plainRequestJSON(spend) == (try IdempotencyStore.foundationRequestJSON(spend)))
    }

    @Test func freshIDsAreVersionFourUUIDs() throws {
        var seen = Set<String>()
        for _ in 0..<10_000 {
            let id = FreshID.uuid()
            #expect(id.wholeMatch(of: /[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}/) != nil, "\(id)")
            #expect(UUID(uuidString: id)?.uuidString.lowercased() == id)
            seen.insert(id)
        }
        #expect(seen.count == 10_000)
        let hex = FreshID.hex()
        #expect(hex.wholeMatch(of: /[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}/) != nil, "\(hex)")
        #expect(FreshID.value().uuidString.lowercased().wholeMatch(of: /[0-9a-f-]{14}4[0-9a-f-]{21}/) != nil)
        // Every bit outside the version and variant varies: no byte is stuck.
        let many = (0..<256).map { _ in Array(FreshID.hex().utf8) }
        for position in 0..<32 where position != 12 && position != 16 {
            #expect(Set(many.map { $0[position] }).count > 4, "digit \(position)")
        }
    }
}
