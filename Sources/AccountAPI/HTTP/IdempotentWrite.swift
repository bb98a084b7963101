import Foundation
import HTTPTypes
import Hummingbird
import Ledger
import Logging
import NIOCore
import Storage

/// Runs a token-moving write at most once per (caller, `Idempotency-Key`). The operation runs inside a
/// savepoint: a ledger failure rolls its writes back and is stored like a success, so a retry replays it
/// (a retried `insufficient_tokens` never succeeds later). Same key with another body → 409 naming the fields.
struct IdempotentWrite: Sendable {
    let database: any Database
    let store: IdempotencyStore

    func run<T: Encodable & Sendable>(
        caller: String, request: Request, fields: [String: String], status: HTTPResponse.Status, logger: Logger,
        _ operation: @escaping @Sendable (any SQLExecutor) async throws -> T
    ) async throws -> Response {
        let key = try Self.key(request)
        var attempt = 0
        while true {
            attempt += 1
            do {
                let (code, body, replayed) = try await database.transaction(logger: logger) { tx -> (Int, String, Bool) in
                    switch try await store.lookup(tx, caller: caller, key: key, request: fields) {
                    case .replay(let code, let body): return (code, body, true)
                    case .conflict(let differing): throw Self.conflict(differing)
                    case nil: break
                    }
                    try await tx.query("SAVEPOINT idempotent_operation")
                    let code: Int
                    let body: String
                    do {
                        // No RELEASE on success: COMMIT ends the savepoint too, and one round trip fewer is held
                        // under the ledger's row locks.
                        let value = try await operation(tx)
                        (code, body) = (status.code, try Self.encode(value))
                    } catch let error as LedgerError {
                        try await tx.query("ROLLBACK TO SAVEPOINT idempotent_operation")
                        let problem = error.problem
                        (code, body) = (problem.status.code, try problem.jsonText())
                    }
                    try await store.save(tx, caller: caller, key: key, request: fields, status: code, body: body)
                    return (code, body, false)
                }
                return Self.response(code: code, body: body, replayed: replayed)
            } catch StorageError.uniqueViolation where attempt < 3 {
                continue  // the same key raced in from another request: the next attempt replays it
            }
        }
    }

    /// The answer to a write done in one statement elsewhere (`Ledger.spendInOneStatement`); nil → run it here.
    static func response(_ outcome: OneStatementSpend, status: HTTPResponse.Status, fields: [String: String]) throws -> Response? {
        switch outcome {
        case .spent(let body, _): return response(code: status.code, body: body, replayed: false)
        case .stored(let code, let body, let storedRequest):
            if case .conflict(let differing) = IdempotencyStore.outcome(storedRequestJSON: storedRequest, status: code, body: body, request: fields) {
                throw conflict(differing)
            }
            return response(code: code, body: body, replayed: true)
        case .fallback: return nil
        }
    }

    static func conflict(_ differing: [String]) -> Problem {
        Problem(.conflict, code: "idempotency_conflict", detail: "This Idempotency-Key was used with a different request (\(differing.joined(separator: ", ")) differ).")
            .with("fields", .strings(differing))
    }

    static func response(code: Int, body: String, replayed: Bool) -> Response {
        let isProblem = code >= 400
        var headers: HTTPFields = [.contentType: isProblem ? "application/problem+json" : "application/json; charset=utf-8"]
        if replayed { headers[.idempotentReplayed] = "true" }
        return Response(status: HTTPResponse.Status(code: code), headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    static func key(_ request: Request) throws -> String {
        guard let key = request.headers[.idempotencyKey]?.trimmingCharacters(in: .whitespaces), !key.isEmpty else {
            throw Problem.validation("The Idempotency-Key header is required for this write (any unique string up to 255 characters).")
        }
        guard key.utf8.count <= 255 else { throw Problem.validation("Idempotency-Key must be at most 255 characters.") }
        return key
    }

    static func encode<T: Encodable>(_ value: T) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }
}

extension HTTPField.Name {
    static let idempotentReplayed = Self("Idempotent-Replayed")!
}

extension Problem {
    /// The problem body as JSON text.
    func jsonText() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return String(decoding: try encoder.encode(body), as: UTF8.self)
    }
}

extension LedgerError {
    var problem: Problem {
        switch self {
        case .insufficientTokens(let available):
            Problem(HTTPResponse.Status(code: 402, reasonPhrase: "Payment Required"), code: "insufficient_tokens", detail: "Not enough tokens: \(available) available.")
                .with("availableTokens", .int(Int(available)))
        case .holdNotFound: Problem.notFound("No such hold.")
        case .holdResolved(let hold):
            Problem(.conflict, code: "hold_resolved", detail: "The hold is already \(hold.status); a hold resolves once.")
                .with("holdId", .string(hold.id)).with("holdStatus", .string(hold.status))
                .with("capturedAmount", .int(Int(hold.capturedAmount ?? 0))).with("amount", .int(Int(hold.amount)))
        case .invalid(let detail): Problem.validation(detail)
        }
    }
}
