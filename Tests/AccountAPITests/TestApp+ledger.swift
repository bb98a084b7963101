import Foundation
import HTTPTypes
import HummingbirdTesting
import Ledger
import Logging
import NIOCore
import Storage
import Synchronization
import TestSupport
import Testing

@testable import AccountAPI

extension TestClientProtocol {
    func ledger(_ path: String, key: String?, idempotencyKey: String?, json: String?) async throws -> TestResponse {
        try await send(.post, path, token: key, json: json, headers: idempotencyKey.map { [.idempotencyKey: $0] } ?? [:])
    }
}

extension TestClientProtocol {
    /// `ledger_spends{path="one_statement"}` from /metrics (0 before the first).
    func oneStatementSpends() async throws -> Int { try await metric(#"ledger_spends{path="one_statement"}"#) }

    /// The value of one series in /metrics (0 while it has not appeared).
    func metric(_ series: String) async throws -> Int {
        let text = try await get("/metrics", token: TestApp.metricsToken).text
        let line = text.split(separator: "\n").first { $0.hasPrefix(series + " ") }
        return line.flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0
    }
}

struct BalanceBody: Decodable, Equatable {
    let bonusTokens: Int
    let subscriptionTokens: Int
    let purchasedTokens: Int
    let heldTokens: Int
    let totalTokens: Int
}
