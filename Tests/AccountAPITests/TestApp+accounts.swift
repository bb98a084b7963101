import Auth
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import NIOCore
import Storage
import TestSupport
import Testing

@testable import AccountAPI

extension TestApp {
    /// An API key with `scopes` (its secret).
    func apiKey(_ scopes: [String]) async throws -> String {
        try await dependencies.apiKeys.create(name: "test", scopes: scopes, logger: TestDatabase.logger).secret
    }

    func userID(token: String) async throws -> String {
        try await dependencies.auth.authenticate(token: token, logger: TestDatabase.logger).user.id
    }
}

extension TestClientProtocol {
    func comp(_ app: TestApp, userID: String, plan: String, key: String) async throws -> TestResponse {
        try await send(.post, "/api/admin/users/\(userID)/subscription", token: key, json: #"{"planId":"\#(plan)"}"#)
    }

    func selectProfile(_ token: String, _ profileID: String, pin: String? = nil) async throws -> TestResponse {
        let pinJSON = pin.map { #","pin":"\#($0)""# } ?? ""
        return try await send(.post, "/api/profiles/select", token: token, json: #"{"profileId":"\#(profileID)"\#(pinJSON)}"#)
    }

    func defaultProfileID(_ token: String) async throws -> String {
        try #require(try await get("/api/profiles/available", token: token).json([ProfileBody].self).first { $0.isDefault }).id
    }

    func createProfile(_ token: String, _ json: String) async throws -> TestResponse {
        try await send(.post, "/api/family-profiles", token: token, json: json)
    }
}

struct ProfileBody: Decodable, Equatable {
    let id: String
    let name: String
    let avatar: String?
    let isDefault: Bool
    let canMakePurchases: Bool
    let hasPin: Bool
    let isLocked: Bool
}
