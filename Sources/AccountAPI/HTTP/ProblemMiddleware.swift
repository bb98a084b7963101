import Auth
import Billing
import Entitlements
import Foundation
import HTTPTypes
import Hummingbird
import Identity
import Ledger
import Logging
import NIOHTTP1
import Storage
import Webhooks

/// Turns every error into a problem response. Known problems pass through; framework errors keep their
/// status; storage outages become 503; anything else is logged with the request id and answered 500.
struct ProblemMiddleware<Context: RequestContext>: RouterMiddleware {
    /// Known paths: a path routed for other methods answers 405 with `Allow`.
    let allowedMethods: AllowedMethods

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            throw translate(error, request: request, logger: context.logger)
        }
    }

    /// The problem an error answers: known problems pass through, domain errors map to theirs, framework errors keep
    /// their status, storage outages become 503, anything else is logged and is 500. (The operator console renders the
    /// same problem as a page.)
    func translate(_ error: any Error, request: Request, logger: Logger) -> Problem {
        switch error {
        case let problem as Problem: return problem
        case let error as AuthError: return error.problem
        case let error as LedgerError: return error.problem
        case let error as EntitlementError: return error.problem
        case let error as BillingError: return error.problem
        case let error as WebhookError: return error.problem
        case let error as IdentityError: return error.problem
        case let error as StorageError: return error.problem(logger: logger)
        case let error as any HTTPResponseError:
            if error.status == .notFound {
                let allowed = allowedMethods.methods(for: request.uri.path)
                if !allowed.isEmpty {
                    var problem = Problem(
                        .methodNotAllowed, code: "method_not_allowed",
                        detail: "\(request.uri.path) does not answer \(request.method); it answers \(allowed.joined(separator: ", ")).")
                    problem.headers[.allow] = allowed.joined(separator: ", ")
                    return problem
                }
            }
            return Self.problem(for: error.status, request: request)
        case let error as HTTPParserError:
            // Bad framing in the body (a chunk size of -1 or fff…, a broken chunk): the client's fault, never a 500.
            return Problem.validation("The request body's framing could not be read (\(error)).")
        case is CancellationError:
            return Problem.unavailable("The request was cancelled (server shutting down).")
        default:
            logger.error("unexpected error", metadata: ["error": .error(error)])
            return Problem.internalError
        }
    }

    static func problem(for status: HTTPResponse.Status, request: Request) -> Problem {
        switch status {
        case .notFound: Problem.notFound("No route for \(request.method) \(request.uri.path).")
        case .contentTooLarge: Problem(.contentTooLarge, code: "validation_failed", detail: "The request body is larger than 1 MiB.")
        case .methodNotAllowed: Problem(.methodNotAllowed, code: "method_not_allowed", detail: "Method \(request.method) is not allowed here.")
        case .unauthorized: Problem.unauthorized()
        default:
            status.code < 500
                ? Problem(status, code: "validation_failed", detail: status.reasonPhrase)
                : Problem(status, code: "unavailable", detail: status.reasonPhrase)
        }
    }
}

/// One access-log line per request: method, path (no query string, no headers, no body), status,
/// duration and the request id (in the logger's metadata). Also echoes the id as `X-Request-Id` and sets the headers every
/// response carries: `X-Content-Type-Options: nosniff`, and `Cache-Control: no-store` on API responses that did not choose
/// their own (they carry tokens or personal data).
struct AccessLogMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        let requestID = context.id
        do {
            var response = try await next(request, context)
            ResponseHeaders.add(to: &response.headers, requestID: requestID)
            log(request, context: context, status: response.status.code, start: start)
            return response
        } catch let error as any HTTPResponseError {
            log(request, context: context, status: error.status.code, start: start)
            throw RequestIDError(base: error, requestID: requestID)
        }
    }

    private func log(_ request: Request, context: Context, status: Int, start: ContinuousClock.Instant) {
        let elapsed = ContinuousClock.now - start
        let ms = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
        context.logger.info(
            "request",
            metadata: [
                "method": "\(request.method)", "path": "\(request.uri.path)", "status": "\(status)",
                "duration_ms": "\(String(format: "%.2f", ms))",
            ])
    }
}

/// Adds `X-Request-Id` to an error response.
struct RequestIDError: HTTPResponseError {
    let base: any HTTPResponseError
    let requestID: String
    var status: HTTPResponse.Status { base.status }
    func response(from request: Request, context: some RequestContext) throws -> Response {
        var response = try base.response(from: request, context: context)
        ResponseHeaders.add(to: &response.headers, requestID: requestID)
        return response
    }
}

/// The headers every response carries.
enum ResponseHeaders {
    static func add(to headers: inout HTTPFields, requestID: String) {
        headers[.requestID] = requestID
        headers[.xContentTypeOptions] = "nosniff"
        if headers[.cacheControl] == nil { headers[.cacheControl] = "no-store" }
    }
}

extension HTTPField.Name {
    static let requestID = Self("X-Request-Id")!
    static let stripeSignature = Self("Stripe-Signature")!
    static let idempotencyKey = Self("Idempotency-Key")!
    static let host = Self("Host")!
}
