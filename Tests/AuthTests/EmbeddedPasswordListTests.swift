import Foundation
import Testing

@testable import Auth

@Suite("Embedded password list")
struct EmbeddedPasswordListTests {
    /// The compiled-in list equals resources/common-passwords.txt (lower-cased, comments and blanks left out): run
    /// scripts/embed-resources after editing the file.
    @Test func theCompiledListMatchesTheFile() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("resources/common-passwords.txt"), encoding: .utf8)
        let words = text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty && !$0.hasPrefix("#") }
        #expect(words.count > 2000)
        #expect(CommonPasswords.list == Set(words.map { $0.lowercased() }), "run scripts/embed-resources")
    }
}
