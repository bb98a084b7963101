import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Storage
import TestSupport
import Testing

@testable import AccountAPI

/// Multipart bodies that crashed MultipartKit's parser (a header-name byte ≥ 0x80 indexes past its 128-entry table) are a
/// 400 now, and the server keeps answering.
@Suite("Multipart bodies")
struct MultipartTests {
    @Test func nonASCIIHeaderNamesAreRefusedBeforeParsing() {
        let boundary = Array("b".utf8)
        func body(_ header: [UInt8]) -> [UInt8] { Array("--b\r\n".utf8) + header + Array(": x\r\n\r\nhello\r\n--b--\r\n".utf8) }
        #expect(Multipart.headerNamesAreASCII(body(Array("Content-Disposition".utf8)), boundary: boundary))
        #expect(!Multipart.headerNamesAreASCII(body([0xc3, 0xa9]), boundary: boundary))
        #expect(!Multipart.headerNamesAreASCII(body(Array("X-".utf8) + [0xff]), boundary: boundary))
        // Bytes ≥ 0x80 in a part's body or a header's value are fine.
        #expect(Multipart.headerNamesAreASCII(Array("--b\r\nName: \u{e9}\r\n\r\n\u{ff}\r\n--b--\r\n".utf8), boundary: boundary))
    }

    @Test(arguments: Engine.allCases)
    func aHostileUploadIsA400AndTheServerStaysUp(engine: Engine) async throws {
        try await TestApp.run(engine) { client, app in
            let token = try await client.signUpAndVerify(app, email: "mp@example.com")
            var body = ByteBuffer()
            body.writeString("--xyz\r\n")
            body.writeBytes([0xc3, 0xa9, 0x3a, 0x20, 0x61])
            body.writeString("\r\n\r\ndata\r\n--xyz--\r\n")
            let response = try await client.execute(
                uri: "/api/stickers/upload", method: .post,
                headers: [.authorization: "Bearer \(token)", .contentType: "multipart/form-data; boundary=xyz"], body: body)
            #expect(response.status == .badRequest)
            #expect(try await client.get("/health", token: nil).status == .ok)
        }
    }
}
