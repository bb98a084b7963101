import Foundation
import Hummingbird
import Storage
import TestSupport
import Testing

@testable import AccountAPI

@Suite("Contract")
struct ContractTests {
    /// "METHOD /path/{param}" for every operation in openapi.yaml (the file's own consistent layout:
    /// paths at two spaces, methods at four).
    static func specOperations() throws -> Set<String> {
        let text = try String(contentsOf: repositoryRoot.appendingPathComponent("openapi.yaml"), encoding: .utf8)
        var operations = Set<String>()
        var inPaths = false
        var currentPath: String?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == "paths:" { inPaths = true; continue }
            if inPaths, !line.isEmpty, !line.hasPrefix(" ") { break }
            guard inPaths else { continue }
            if line.hasPrefix("  /"), line.hasSuffix(":"), !line.hasPrefix("   ") {
                currentPath = String(line.dropFirst(2).dropLast())
            } else if let path = currentPath, line.hasPrefix("    "), !line.hasPrefix("     "), line.hasSuffix(":") {
                let method = line.trimmingCharacters(in: .whitespaces).dropLast().uppercased()
                if ["GET", "POST", "PUT", "PATCH", "DELETE"].contains(method) { operations.insert("\(method) \(path)") }
            }
        }
        return operations
    }

    @Test func everyRouteIsInTheSpecAndViceVersa() async throws {
        try await TestApp.run(.sqlite) { _, app in
            let router = buildRouter(app.dependencies)
            let routes = Set(
                router.routes.map { route in
                    let path = "\(route.path)".split(separator: "/").map { $0.hasPrefix(":") ? "{\($0.dropFirst())}" : String($0) }.joined(separator: "/")
                    return "\(route.method.rawValue) /\(path.drop { $0 == "/" })"
                })
            let spec = try Self.specOperations()
            #expect(spec.count >= 16)
            #expect(routes.subtracting(spec).isEmpty, "routes missing from openapi.yaml: \(routes.subtracting(spec).sorted())")
            #expect(spec.subtracting(routes).isEmpty, "documented but not routed: \(spec.subtracting(routes).sorted())")
        }
    }
}

extension ContractTests {
    /// Every problem `code` the sources can answer with is in the spec's `Problem.code` enum (clients switch on it).
    @Test func everyProblemCodeIsDocumented() throws {
        let spec = try String(contentsOf: repositoryRoot.appendingPathComponent("openapi.yaml"), encoding: .utf8)
        let enumStart = try #require(spec.range(of: "        code:\n          type: string\n          enum: ["))
        let enumText = spec[enumStart.upperBound...].prefix { $0 != "]" }
        let documented = Set(enumText.split(separator: ",").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) })
        var used = Set<String>()
        let sources = repositoryRoot.appendingPathComponent("Sources")
        let files = FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)?.compactMap { $0 as? URL } ?? []
        for file in files where file.pathExtension == "swift" {
            let text = try String(contentsOf: file, encoding: .utf8)
            for match in text.matches(of: /code: "([a-z_]+)"/) { used.insert(String(match.output.1)) }
        }
        #expect(used.count >= 20)
        #expect(used.subtracting(documented).isEmpty, "codes missing from Problem.code in openapi.yaml: \(used.subtracting(documented).sorted())")
    }
}
