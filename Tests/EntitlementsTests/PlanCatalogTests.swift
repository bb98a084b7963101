import Entitlements
import Foundation
import Testing

@Suite("Plan catalog")
struct PlanCatalogTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func repositoryCatalogJSON() throws -> [String: Any] {
        let data = try Data(contentsOf: root.appendingPathComponent("plans.json"))
        return try #require(JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    static func parse(_ object: [String: Any]) throws(PlanCatalogError) -> PlanCatalog {
        try PlanCatalog.parse(try! JSONSerialization.data(withJSONObject: object))
    }

    @Test func theRepositoryCatalogIsValid() throws {
        let catalog = try PlanCatalog.load(path: Self.root.appendingPathComponent("plans.json").path)
        #expect(catalog.plans.count == 9)
        #expect(catalog.welcomeTokens == 3)
        #expect(catalog.freePlan.id == "free")
        #expect(!catalog.tokenPacks.isEmpty)
        // The compiled-in catalog (used when PLANS_FILE is not set) is this file: run scripts/embed-resources after editing it.
        #expect(try PlanCatalog.builtIn == catalog, "run scripts/embed-resources")
    }

    @Test func unknownKeysAreRefusedByName() throws {
        var json = try Self.repositoryCatalogJSON()
        var plans = json["plans"] as! [[String: Any]]
        plans[1]["monthlyTokenz"] = 5
        json["plans"] = plans
        json["bonus"] = true
        #expect { try Self.parse(json) } throws: { error in
            let text = "\(error)"
            return text.contains("unknown key 'monthlyTokenz' at plan 'basic_monthly'") && text.contains("unknown key 'bonus' at the top level")
        }
    }

    @Test func duplicatesNegativesAndMissingFreeTierAreAllListed() throws {
        var json = try Self.repositoryCatalogJSON()
        var plans = json["plans"] as! [[String: Any]]
        plans[0]["isFreeTier"] = false
        plans[2]["id"] = "basic_monthly"
        plans[3]["monthlyTokens"] = -1
        plans[4]["appleProductId"] = plans[5]["appleProductId"]
        json["plans"] = plans
        #expect { try Self.parse(json) } throws: { error in
            guard let error = error as? PlanCatalogError else { return false }
            let problems = error.problems.joined(separator: "\n")
            return problems.contains("exactly one plan must have isFreeTier") && problems.contains("duplicate id 'basic_monthly'")
                && problems.contains("monthlyTokens must not be negative") && problems.contains("duplicate product id")
                && error.problems.count >= 4
        }
    }

    @Test func missingFieldsAreNamed() throws {
        var json = try Self.repositoryCatalogJSON()
        var plans = json["plans"] as! [[String: Any]]
        plans[0].removeValue(forKey: "sortOrder")
        json["plans"] = plans
        #expect { try Self.parse(json) } throws: { "\($0)".contains("missing key 'sortOrder'") }
    }
}
