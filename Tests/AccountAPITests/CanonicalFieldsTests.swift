import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import Testing

@testable import AccountAPI

/// Idempotency compares a retry's canonical fields with those stored by earlier builds, so the fast canonicalisation
/// must give exactly what the long way (encode, decode as JSONValue, re-encode each field) gives, for any request.
@Suite("Canonical request fields")
struct CanonicalFieldsTests {
    struct Odd: Encodable {
        let ratio: Double
        let tags: [String]
        let when: Date?
        let flag: Bool?
    }

    /// A struct that encodes itself by hand, with a nested container at the top.
    struct HandWritten: Encodable {
        let inner: String
        enum Keys: String, CodingKey { case outer, inner }
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Keys.self)
            var nested = container.nestedContainer(keyedBy: Keys.self, forKey: .outer)
            try nested.encode(inner, forKey: .inner)
        }
    }

    static let pieces = [
        "", "a", "plain words", "quote\"inside", "back\\slash", "slash/", "tab\t", "new\nline", "\u{0}", "\u{7F}", "é", "日本",
        "👍🏽", "\u{2028}", "\u{1F}", "{\"json\":1}", "-0", "1e400",
    ]

    static func text<G: RandomNumberGenerator>(_ g: inout G) -> String {
        (0..<Int.random(in: 0...3, using: &g)).map { _ in pieces.randomElement(using: &g) ?? "" }.joined()
    }

    static func json<G: RandomNumberGenerator>(_ g: inout G, depth: Int = 0) -> JSONValue {
        switch Int.random(in: 0..<(depth > 2 ? 5 : 7), using: &g) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &g))
        case 2: return .integer(Int64.random(in: Int64.min...Int64.max, using: &g))
        case 3: return .number(Decimal(string: "\(Int.random(in: -999...999, using: &g)).\(Int.random(in: 1...99, using: &g))") ?? 1)
        case 4: return .string(text(&g))
        case 5: return .array((0..<Int.random(in: 0...3, using: &g)).map { _ in json(&g, depth: depth + 1) })
        default:
            return .object(Dictionary((0..<Int.random(in: 0...3, using: &g)).map { _ in (text(&g), json(&g, depth: depth + 1)) }) { a, _ in a })
        }
    }

    @Test func fastEqualsTheLongWayForAnyRequest() {
        var g = SystemRandomNumberGenerator()
        for _ in 0..<3_000 {
            let extra = Bool.random(using: &g) ? ["endpoint": "spend", "userId": Self.text(&g)] : [:]
            let spend = LedgerController.SpendRequest(
                userId: Self.text(&g), amount: Int64.random(in: Int64.min...Int64.max, using: &g), reason: Self.text(&g),
                metadata: Bool.random(using: &g) ? Self.json(&g) : nil)
            #expect(canonicalFields(spend, extra: extra) == CanonicalFields.slowFields(spend, extra: extra))
            let reserve = EntitlementController.ReserveRequest(
                userId: Self.text(&g), profileId: Bool.random(using: &g) ? Self.text(&g) : nil, action: Self.text(&g),
                quantity: Int.random(in: -5...5, using: &g), attributes: [Self.text(&g): Self.text(&g)], tokens: nil, packId: nil,
                ttlSeconds: Int.random(in: 0...100, using: &g), metadata: Self.json(&g), askToBuy: Bool.random(using: &g))
            #expect(canonicalFields(reserve, extra: extra) == CanonicalFields.slowFields(reserve, extra: extra))
            let odd = Odd(
                ratio: Double.random(in: -1e6...1e6, using: &g), tags: [Self.text(&g)], when: Date(timeIntervalSince1970: 1_800_000_000),
                flag: Bool.random(using: &g) ? true : nil)
            #expect(canonicalFields(odd, extra: extra) == CanonicalFields.slowFields(odd, extra: extra))
        }
        let hand = HandWritten(inner: "x")
        #expect(canonicalFields(hand) == ["outer": #"{"inner":"x"}"#])
        #expect(canonicalFields("not an object", extra: ["endpoint": "e"]) == ["endpoint": "e"])
        #expect(
            canonicalFields(LedgerController.SpendRequest(userId: "u", amount: 5, reason: "r", metadata: nil)) == [
                "userId": "\"u\"", "amount": "5", "reason": "\"r\"",
            ])
    }
}

/// Header readers and metric names on the hot path take short cuts for the common case; each must answer what the
/// general rule answers.
@Suite("Hot-path short cuts")
struct HotPathShortCutTests {
    static func request(_ fields: HTTPFields) -> Request {
        Request(
            head: HTTPRequest(method: .post, scheme: "http", authority: "localhost", path: "/", headerFields: fields),
            body: .init(buffer: ByteBuffer()))
    }

    @Test func idempotencyKeysAreTrimmedAsFoundationTrims() throws {
        for raw in ["k-1", " k-1", "k-1 ", "\tk 1\t", "  ", "é", " é ", "k\u{00A0}", "\u{3000}k", "a", "~x!"] {
            let expected = raw.trimmingCharacters(in: .whitespaces)
            #expect(IdempotentResponse.trimmed(raw) == expected, "\(raw.debugDescription)")
            if expected.isEmpty {
                #expect(throws: (any Error).self) { try IdempotentResponse.key(Self.request([.idempotencyKey: raw])) }
            } else {
                #expect(try IdempotentResponse.key(Self.request([.idempotencyKey: raw])) == expected)
            }
        }
    }

    @Test func bearerTokensAreReadAsTheRuleSays() {
        let cases: [(String, String?)] = [
            ("Bearer abc", "abc"), ("bearer abc", "abc"), ("BEARER  abc\t ", "abc"), ("Bearer \tab c ", "ab c"), ("Bearer ", nil),
            ("Bearer", nil), ("Basic abc", nil), ("Bearerabc", nil), ("Bearer    ", nil), ("Bearer é", "é"), ("Bearer 日本 ", "日本"),
        ]
        for (header, expected) in cases {
            #expect(Authenticator.bearerToken(Self.request([.authorization: header])) == expected, "\(header.debugDescription)")
        }
        // The value as it is, without HTTPTypes' trimming of the field: the reader's own trimming.
        let raw: [(String, String?)] = [
            ("BEARER  abc\t ", "abc"), ("Bearer    ", ""), ("bearer \t x \t", "x"), ("Bearer  日本\t", "日本"), ("Bearer", nil), ("Bear", nil),
            ("Béarer x", nil), ("", nil),
        ]
        for (header, expected) in raw { #expect(Authenticator.bearerToken(header: header) == expected, "\(header.debugDescription)") }
        #expect(Authenticator.bearerToken(Self.request([:])) == nil)
    }

    @Test func metricNamesKeepOnlyASCIILettersAndDigits() {
        let cases = [
            ("hb_requests", "hb_requests"), ("http.server.request.duration", "http_server_request_duration"), ("a-b c", "a_b_c"),
            ("é1", "_1"), ("日本x", "__x"), ("👍🏽", "__"), ("", ""), ("Z9_z", "Z9_z"),
        ]
        for (label, expected) in cases { #expect(AppMetrics.sanitize(label) == expected, "\(label)") }
    }
}
