import Foundation
import TestSupport
import Testing

@testable import WebAuthn

@Suite("CBOR decoding of untrusted bytes")
struct CBORTests {
    @Test func decodesWhatWebAuthnUses() throws {
        let bytes = CBORWriter.map([
            (.text("fmt"), .text("none")), (.text("attStmt"), .map([])), (.int(-7), .bytes([1, 2, 3])), (.int(1_000_000), .array([.int(-300)])),
        ])
        let item = try CBORDecoder.decode(bytes)
        #expect(item["fmt"] == .text("none"))
        #expect(item["attStmt"] == .map([]))
        #expect(item[-7] == .bytes([1, 2, 3]))
        #expect(item[1_000_000] == .array([.negative(299)]))
        #expect(CBOR.negative(299).integer == -300)
        #expect(try CBORDecoder.decode([0xf5, 0xf6].prefix(1).map { $0 }) == .bool(true))
        #expect(try CBORDecoder.decode([0x1b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]) == .unsigned(UInt64.max))
        #expect(CBOR.unsigned(UInt64.max).integer == nil)
        #expect(CBOR.negative(UInt64.max).integer == nil)
        let (prefix, used) = try CBORDecoder.decodePrefix([0x01, 0x02])
        #expect(prefix == .unsigned(1) && used == 1)
    }

    /// Each refusal the decoder promises, with its reason.
    @Test(
        arguments: [
            ([], "ends early"),
            ([0x01, 0x02], "follow"),
            ([0x5f, 0x41, 0x00, 0xff], "indefinite"),
            ([0x9f, 0x01, 0xff], "indefinite"),
            ([0xc2, 0x41, 0x00], "tags"),
            ([0xf9, 0x3c, 0x00], "floats"),
            ([0xfb, 0, 0, 0, 0, 0, 0, 0, 0], "floats"),
            ([0x1c], "reserved"),
            ([0x5b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], "runs past"),
            ([0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], "runs past"),
            ([0xbb, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], "runs past"),
            ([0x62, 0xc3, 0x28], "UTF-8"),
            ([0xa2, 0x01, 0x02, 0x01, 0x03], "repeats a key"),
            ([0xa2, 0x61, 0x61, 0x01, 0x61, 0x61, 0x02], "repeats a key"),
        ] as [([UInt8], String)])
    func refusals(bytes: [UInt8], reason: String) {
        do {
            _ = try CBORDecoder.decode(bytes)
            Issue.record("accepted \(bytes)")
        } catch {
            #expect(error.description.contains(reason), "\(error.description)")
        }
    }

    @Test func depthAndItemCountAreBounded() throws {
        let deep = [UInt8](repeating: 0x81, count: CBORDecoder.depthMax + 1) + [0x00]
        #expect(throws: CBORError.self) { try CBORDecoder.decode(deep) }
        let fits = [UInt8](repeating: 0x81, count: CBORDecoder.depthMax) + [0x00]
        #expect(throws: Never.self) { try CBORDecoder.decode(fits) }
        // 100,000 nested arrays: refused at the depth limit, never a stack overflow.
        #expect(throws: CBORError.self) { try CBORDecoder.decode([UInt8](repeating: 0x81, count: 100_000)) }
        let many = CBORWriter.head(4, UInt64(CBORDecoder.itemsMax)) + [UInt8](repeating: 0x00, count: CBORDecoder.itemsMax)
        #expect(throws: CBORError.self) { try CBORDecoder.decode(many) }
    }

    /// Mutants of the committed corpus (`Tests/FuzzCorpus/webauthn-cbor`) and of real attestation objects, COSE keys and
    /// authenticator data: each is a value or a refusal, never a trap;
    /// the unmutated inputs decode.
    @Test func fuzzedInputsNeverTrap() async throws {
        let es = try SoftAuthenticator(rpID: "example.com", origin: "https://example.com", userHandle: [1, 2, 3])
        let rs = try SoftAuthenticator(rpID: "example.com", origin: "https://example.com", userHandle: [4], algorithm: .rs256)
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        var corpus = try Fuzzer.corpus("webauthn-cbor", root: root)
        #expect(corpus.count >= 7)
        for authenticator in [es, rs] {
            let registration = try authenticator.registration(challenge: "AAAA")
            let response = try #require(registration["response"] as? [String: String])
            corpus.append(try #require(Base64URL.decode(response["attestationObject"] ?? "", bytesMax: 16_384)))
            corpus.append(try authenticator.publicKeyCBOR())
        }
        let party = RelyingParty(id: "example.com", name: "Example", origins: ["https://example.com"])
        var decoded = 0
        var credentials = 0
        let count = await Fuzzer(corpus: corpus, iterationsMin: 2001).run { input in
            if (try? CBORDecoder.decode(input)) != nil { decoded += 1 }
            if (try? party.registration(attestationObject: input)) != nil { credentials += 1 }
            _ = try? COSEKey(cbor: input)
            _ = try? AuthenticatorData(input)
            _ = try? CBORDecoder.decodePrefix(input)
        }
        #expect(count > 2000 && decoded >= 4 && credentials >= 2)
    }
}
