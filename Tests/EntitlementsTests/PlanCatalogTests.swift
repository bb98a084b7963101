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

    @Test func rateCardProblemsAreAllListed() throws {
        var json = try Self.repositoryCatalogJSON()
        var actions = json["actions"] as! [[String: Any]]
        #expect(actions.count >= 4)
        actions[1]["id"] = actions[0]["id"]
        actions[2]["tokensPerUnit"] = 0
        actions[2]["maxQuantity"] = 101
        actions[2]["plans"] = ["platinum"]
        actions[2]["requiresProfilePermission"] = "canFly"
        var attributes = actions[3]["attributes"] as! [[String: Any]]
        attributes[0]["defaultValue"] = "4k"
        var values = attributes[1]["values"] as! [[String: Any]]
        values[0]["extraTokensPerUnit"] = -1
        values[1]["value"] = values[2]["value"]
        values[1]["cost"] = 3
        attributes[1]["values"] = values
        actions[3]["attributes"] = attributes
        actions[0]["id"] = "generate coloring"
        json["actions"] = actions
        #expect { try Self.parse(json) } throws: { error in
            guard let error = error as? PlanCatalogError else { return false }
            let problems = error.problems.joined(separator: "\n")
            return problems.contains("id must be 1 to 64 letters") && problems.contains("tokensPerUnit must be from 1")
                && problems.contains("maxQuantity must be from 1 to 100") && problems.contains("unknown plan 'platinum'")
                && problems.contains("requiresProfilePermission must be one of") && problems.contains("defaultValue is not a value")
                && problems.contains("extraTokensPerUnit must be from 0") && problems.contains("duplicate value")
                && problems.contains("unknown key 'cost'")
        }
        // A catalog without a rate card is still valid (no priced actions).
        json.removeValue(forKey: "actions")
        #expect(try Self.parse(json).pricedActions.isEmpty)
    }

    @Test func missingFieldsAreNamed() throws {
        var json = try Self.repositoryCatalogJSON()
        var plans = json["plans"] as! [[String: Any]]
        plans[0].removeValue(forKey: "sortOrder")
        json["plans"] = plans
        #expect { try Self.parse(json) } throws: { "\($0)".contains("missing key 'sortOrder'") }
    }
}
