import AsyncHTTPClient
import Auth
import Billing
import Entitlements
import Foundation
import HTTPTypes
import HummingbirdTesting
import Identity
import Media
import NIOCore
import SafeJSON
import Storage
import TestSupport
import Testing

@testable import AccountAPI

/// Every parser of untrusted bytes gets mutants of a committed corpus (`Tests/FuzzCorpus/…`) for `FUZZ_SECONDS`: a trap
/// ends the process (the failure hunted), and each answer must be a clean refusal or a value. Multipart has its own
/// target in ``MultipartTests``; chunked framing is NIO's and is attacked against a real process (`scripts/attack a18`).
@Suite("Fuzzing the parsers of untrusted bytes")
struct ParserFuzzTests {
    /// Stripe-Signature headers (our own parser): any header either verifies or is refused with a reason.
    @Test func stripeSignatureHeaders() async throws {
        let verifier = StripeSignatureVerifier(secrets: ["whsec_test"])
        let body = Array(#"{"id":"evt_1"}"#.utf8)
        let valid = StripeSignatureVerifier.header(rawBody: body, secret: "whsec_test", timestamp: 1_732_492_800)
        var corpus = try Fuzzer.corpus("stripe-signature", root: repositoryRoot)
        corpus.append(Array(valid.utf8))
        corpus.append(Array(valid.replacingOccurrences(of: "1732492800", with: "-9223372036854775808").utf8))
        let now = Date(timeIntervalSince1970: 1_732_492_800)
        var verified = 0
        let count = await Fuzzer(corpus: corpus, iterationsMin: 1001).run { input in
            do {
                try verifier.verify(rawBody: body, header: String(decoding: input, as: UTF8.self), now: now)
                verified += 1
            } catch let error as StripeSignatureError {
                #expect(!error.detail.isEmpty)
            } catch {
                Issue.record("unexpected \(error)")
            }
        }
        #expect(count > 1000 && verified >= 1)
        // A signed timestamp at the edge of Int64 is stale, never an overflow.
        let edge = StripeSignatureVerifier.header(rawBody: body, secret: "whsec_test", timestamp: Int64.min)
        #expect(throws: StripeSignatureError.self) { try verifier.verify(rawBody: body, header: edge, now: now) }
    }

    /// Email addresses, the key every account is found by: any bytes give nil or one spelling that is its own
    /// normal form (NFC with no compatibility form, at most 254 bytes, an ASCII domain, no space or control character), and canonically
    /// equivalent spellings (composed, decomposed) give the same answer.
    @Test func emailAddresses() async throws {
        var accepted = 0
        let count = await Fuzzer(corpus: try Fuzzer.corpus("email-addresses", root: repositoryRoot), iterationsMin: 1001).run { input in
            let raw = String(decoding: input, as: UTF8.self)
            let email = InputRules.normalizedEmail(raw)
            #expect(email == InputRules.normalizedEmail(raw.decomposedStringWithCanonicalMapping), "\(input)")
            guard let email else { return }
            accepted += 1
            let domain = email.split(separator: "@").last ?? ""
            #expect(InputRules.normalizedEmail(email) == email, "\(input)")
            #expect(email.utf8.count <= InputRules.emailBytesMax && email == email.precomposedStringWithCompatibilityMapping)
            #expect(domain.utf8.allSatisfy { $0 < 0x80 } && !email.unicodeScalars.contains { CharacterSet.controlCharacters.contains($0) })
            #expect(!email.contains { $0.isWhitespace })
        }
        #expect(count > 1000 && accepted >= 4)
    }

    /// Image sniffing before the worker: any bytes give a format or nil.
    @Test func imageHeaders() async throws {
        let corpus: [[UInt8]] = [
            [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13], Array("GIF89a".utf8), Array("RIFF\u{0}\u{0}\u{0}\u{0}WEBPVP8 ".utf8), [],
        ]
        var recognised = 0
        let count = await Fuzzer(corpus: corpus, iterationsMin: 1001).run { input in if ImageFormat.sniff(input) != nil { recognised += 1 } }
        #expect(count > 1000 && recognised >= 3)
    }

    /// Apple's signed transactions (JWS with an x5c chain): mutants of a real one verify only unchanged, and every
    /// other one is refused with a reason, never a trap.
    @Test func appleSignedTransactions() async throws {
        let chain = try AppleTestChain()
        let verifier = AppleSignedDataVerifier(
            config: AppleConfig(
                rootCertificates: [chain.root], bundleID: "com.example.app", appAppleID: 1234, environment: .sandbox, acceptSandbox: false))
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let jws = try chain.sign(json: [
            "transactionId": "2000000001", "originalTransactionId": "2000000001", "bundleId": "com.example.app", "productId": "p",
            "purchaseDate": now, "type": "Consumable", "environment": "Sandbox", "signedDate": now, "quantity": 1,
        ])
        let fuzzer = Fuzzer(
            corpus: [Array(jws.utf8), Array("a.b.c".utf8), Array("..".utf8)], seconds: min(Fuzzer(corpus: []).seconds, 2), iterationsMin: 51)
        var accepted = 0
        let count = await fuzzer.runAsync { input in
            do {
                _ = try await verifier.verifyTransaction(String(decoding: input, as: UTF8.self))
                accepted += 1
            } catch let error as AppleVerificationError {
                #expect(!error.detail.isEmpty)
            } catch {
                Issue.record("unexpected \(error)")
            }
        }
        #expect(count > 50 && accepted >= 1)
    }

    /// Sign in with Apple identity tokens (jwt-kit behind our checks): mutants of a real token are refused with an
    /// `IdentityError`, never a trap; the unchanged one verifies.
    @Test func appleIdentityTokens() async throws {
        let apple = try AppleIdentityFixture()
        try await apple.run { jwksURL in
            let now = Date()
            let verifier = AppleIdentityVerifier(
                clientIDs: [AppleIdentityFixture.clientID], keySet: AppleKeySet(url: jwksURL, client: HTTPClient.shared, now: { now }), now: { now })
            let token = try apple.token(apple.claims(sub: "000123.abc", email: "fuzz@privaterelay.appleid.com", now: now))
            let fuzzer = Fuzzer(corpus: [Array(token.utf8), Array("e30.e30.".utf8)], seconds: min(Fuzzer(corpus: []).seconds, 2), iterationsMin: 51)
            var accepted = 0
            let count = await fuzzer.runAsync { input in
                do {
                    _ = try await verifier.verify(String(decoding: input, as: UTF8.self), nonce: nil)
                    accepted += 1
                } catch is IdentityError {
                } catch {
                    Issue.record("unexpected \(error)")
                }
            }
            #expect(count > 50 && accepted >= 1)
        }
    }

    /// JSON bodies through the real router: mutants of the corpus against every kind of endpoint answer 4xx or 2xx,
    /// never 5xx.
    @Test func jsonBodiesThroughTheRouter() async throws {
        try await TestApp.run(.sqlite, configure: PasskeyHTTPTests.configure) { client, app in
            let key = try await app.apiKey(["ledger:write", "admin"])
            let paths = [
                "/api/auth/sign-in", "/api/auth/sign-up", "/api/verify-otp", "/api/ledger/spend", "/api/ledger/grants", "/api/ledger/holds",
                "/api/auth/passkeys/sign-in/verify",
            ]
            let corpus = try Fuzzer.corpus("json-bodies", root: repositoryRoot)
            var statuses: [Int: Int] = [:]
            var index = 0
            let count = await Fuzzer(corpus: corpus, seconds: min(Fuzzer(corpus: []).seconds, 3), iterationsMin: 100).runAsync { input in
                index += 1
                let response = try? await client.execute(
                    uri: paths[index % paths.count], method: .post,
                    headers: [.contentType: "application/json", .authorization: "Bearer \(key)", .idempotencyKey: "fuzz-\(index)"],
                    body: ByteBuffer(bytes: input))
                let status = response.map { Int($0.status.code) } ?? 0
                statuses[status, default: 0] += 1
                #expect((200..<500).contains(status), "\(status) for \(String(decoding: input, as: UTF8.self))")
            }
            #expect(count >= 100, "\(statuses)")
        }
    }

    /// Number literals of every shape and length through the one door for outside JSON (`SafeJSON`): longer than 100
    /// characters is refused; shorter ones decode or throw into integer, narrow integer, `Double` and `Decimal` fields, never
    /// trap. Foundation's integer slow path trapped on ~170-digit literals whose value fits `Int64` (`1` + 170 zeros +
    /// `e-154`): this sweep walks the lengths and values around that edge.
    /// The digits from the first non-zero to the last of a literal's mantissa.
    static func significantDigits(_ literal: String) -> Int {
        let mantissa = literal.split(whereSeparator: { $0 == "e" || $0 == "E" }).first.map(String.init) ?? literal
        let digits = mantissa.filter(\.isNumber).drop(while: { $0 == "0" })
        return String(digits.reversed()).drop(while: { $0 == "0" }).count
    }

    /// A literal with a fraction or exponent that is not whole (by `Decimal`, exact here) but parses to a whole `Double`.
    static func roundsToWhole(_ literal: String) -> Bool {
        guard literal.contains(where: { ".eE".contains($0) }), let double = Double(literal), double.isFinite, double == double.rounded(.towardZero)
        else { return false }
        guard var exact = Decimal(string: literal), exact.isFinite, !exact.isNaN else { return true }
        var whole = Decimal()
        NSDecimalRound(&whole, &exact, 0, .plain)
        return whole != exact
    }

    @Test func numberLiteralsNeverTrapTheDecoder() throws {
        struct Fields: Decodable {
            let i: Int64?
            let n: Int?
            let u: UInt8?
            let d: Double?
            let x: Decimal?
        }
        var literals: [String] = ["1e400", "-1e400", "9223372036854775808", "-9223372036854775809", "1.5", "0.0000001e7", "1E+18"]
        for zeros in stride(from: 0, through: 130, by: 1) {
            for magnitude in [0, 15, 16, 17, 18, 19, 25] where zeros >= magnitude {
                literals.append("1" + String(repeating: "0", count: zeros) + "e-\(zeros - magnitude)")
                literals.append("-9" + String(repeating: "0", count: zeros) + "E-\(zeros - magnitude)")
                literals.append("1." + String(repeating: "0", count: zeros) + "1e\(magnitude)")
            }
        }
        var refused = 0
        var decoded = 0
        for literal in literals {
            for field in ["i", "n", "u", "d", "x"] {
                let body = Data(#"{"\#(field)":\#(literal)}"#.utf8)
                do {
                    _ = try UntrustedJSON.decode(Fields.self, from: body)
                    decoded += 1
                } catch is UntrustedJSON.Refusal {
                    #expect(
                        literal.utf8.count > UntrustedJSON.numberBytesMax || Self.significantDigits(literal) > UntrustedJSON.significantDigitsMax
                            || Self.roundsToWhole(literal),
                        "\(literal) refused")
                    refused += 1
                } catch {}
            }
            if literal.utf8.count > UntrustedJSON.numberBytesMax {
                #expect(throws: UntrustedJSON.Refusal.self) { try UntrustedJSON.check(Data(#"{"i":\#(literal)}"#.utf8)) }
            }
        }
        // The same document in UTF-16 or UTF-32 (which Foundation decodes, and where a digit run hides between zero bytes)
        // is refused whatever its numbers.
        let long = #"{"i":1"# + String(repeating: "0", count: 170) + "e-154}"
        for encoding: String.Encoding in [.utf16, .utf16LittleEndian, .utf16BigEndian, .utf32, .utf32LittleEndian, .utf32BigEndian] {
            let data = try #require(long.data(using: encoding))
            #expect(throws: UntrustedJSON.Refusal.self) { try UntrustedJSON.decode(Fields.self, from: data) }
            #expect(throws: UntrustedJSON.Refusal.self) { try UntrustedJSON.check(try #require(#"{"i":1}"#.data(using: encoding))) }
        }
        // Digits inside strings (escaped quotes included) are text, not numbers.
        let text = Data(#"{"s":"\"\#(String(repeating: "9", count: 500))"}"#.utf8)
        #expect(throws: Never.self) { try UntrustedJSON.check(text) }
        #expect(decoded > 1000 && refused > 100, "decoded \(decoded), refused \(refused)")
    }

    /// The same key twice in one object is refused wherever it is (Foundation keeps the first, other parsers the last),
    /// escaped forms included; the same key in different objects, keys inside strings and arrays of objects are fine.
    /// Numbers are kept exactly (metadata as `Decimal`): one with more significant digits than that holds is refused,
    /// not rounded; zeros around them and the exponent do not count.
    @Test func numbersBeyondExactPrecisionAreRefused() throws {
        let digits38 = "12345678901234567890123456789012345678"
        for refused in [
            #"{"a":1.00000000000000000000000000000000000000001}"#, "{\"a\":\(digits38)9}", "[-\(digits38)1e5]", "{\"a\":\(digits38).5}",
        ] {
            #expect(throws: UntrustedJSON.Refusal.self, "\(refused)") { try UntrustedJSON.check(Data(refused.utf8)) }
        }
        for accepted in [
            "{\"a\":\(digits38)}", "{\"a\":-\(digits38)e-40}", #"{"a":1000000000000000000000000000000000000000000000}"#,
            #"{"a":0.000000000000000000000000000000000000000000123}"#, #"{"s":"123456789012345678901234567890123456789012345"}"#,
            "{\"a\":\(digits38)00000}",
        ] {
            #expect(throws: Never.self, "\(accepted)") { try UntrustedJSON.check(Data(accepted.utf8)) }
        }
    }

    /// A number with a fraction that a binary parse would round to a whole number is refused: Foundation reads integer
    /// fields through `Double`, so these became 1, 1, 5, 0 and 100000000 in integer fields (an outside tester's grants and
    /// allowances), while `0.5` is refused. Whole numbers written with a fraction or exponent, and fractions a `Double`
    /// keeps as fractions, pass; so do `true`, `false` and `null`, whose letters include `e`.
    @Test func fractionsThatWouldRoundToWholeNumbersAreRefused() throws {
        for refused in [
            #"{"amount":99999999999999999999999999999999999999e-38}"#, #"{"amount":1.0000000000000000001}"#,
            #"{"m":4.9999999999999999999}"#, #"{"m":1e-400}"#, #"[99999999999999999999999999999999999999e-30]"#,
            #"{"a":-0.99999999999999999999}"#, #"{"a":4.9999999999999999}"#, "12345678901234567.5",
        ] {
            #expect(throws: UntrustedJSON.Refusal.self, "\(refused)") { try UntrustedJSON.check(Data(refused.utf8)) }
        }
        for accepted in [
            #"{"a":1.0,"b":1e3,"c":1.50e1,"d":100e-2,"e":0.0,"f":-2E+2}"#, #"{"a":0.30000000000000004,"b":0.5,"c":2.5e-3}"#,
            #"[true,false,null,1.25]"#, "4.999999999999", #"{"a":1e308}"#, "0.1",
        ] {
            #expect(throws: Never.self, "\(accepted)") { try UntrustedJSON.check(Data(accepted.utf8)) }
        }
        struct Grant: Decodable { let amount: Int64 }
        #expect(throws: (any Error).self) { _ = try UntrustedJSON.decode(Grant.self, from: Data(#"{"amount":0.99999999999999999999e0}"#.utf8)) }
        #expect(try UntrustedJSON.decode(Grant.self, from: Data(#"{"amount":1.0e1}"#.utf8)).amount == 10)
    }

    @Test func duplicateKeysAreRefusedAtAnyDepth() throws {
        for refused in [
            #"{"quality":"standard","quality":"ultra"}"#, #"{"a":1,"\u0061":2}"#, #"{"m":{"x":[{"k":1,"k":2}]}}"#,
            #"{"a":{"b":1},"a":[]}"#, #"[{"q":1},{"q":1,"q":2}]"#, #"{"é":1,"\u00e9":2}"#,
            // Canonically equivalent keys, which a decoded dictionary merges: precomposed and combining, raw and escaped.
            "{\"\u{E9}\":1,\"e\u{301}\":2}", #"{"\u00e9":1,"e\u0301":2}"#, "{\"m\":{\"\u{C5}\":1,\"\u{212B}\":2}}",
        ] {
            #expect(throws: UntrustedJSON.Refusal.self, "\(refused)") { try UntrustedJSON.check(Data(refused.utf8)) }
        }
        for accepted in [
            #"{"a":1,"b":{"a":1},"c":[{"a":1},{"a":2}]}"#, #"{"s":"\"a\":1,\"a\":2","t":["a","a"]}"#, #"{"":1,"\"":2}"#, #"[["a","a"]]"#,
            "{\"\u{E9}\":1,\"e\":2}",
        ] {
            #expect(throws: Never.self, "\(accepted)") { try UntrustedJSON.check(Data(accepted.utf8)) }
        }
        // Seeded mutations of a body with many keys: a refusal is always a real duplicate, never a trap.
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<300 {
            let keys = (0..<Int.random(in: 1...12, using: &generator)).map { _ in ["a", "b", "c", "d", "e"].randomElement(using: &generator)! }
            let body = "{" + keys.enumerated().map { #""\#($1)":\#($0)"# }.joined(separator: ",") + "}"
            let duplicated = Set(keys).count != keys.count
            do {
                try UntrustedJSON.check(Data(body.utf8))
                #expect(!duplicated, "\(body)")
            } catch {
                #expect(duplicated, "\(body)")
            }
        }
    }
}
