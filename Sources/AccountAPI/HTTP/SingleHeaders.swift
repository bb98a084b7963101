import HTTPTypes
import Hummingbird

/// Headers that mean one thing may come once. Sent twice, a reader takes the values joined (`k1, k2`) or the first one,
/// and another hop (a proxy, a cache) may take the other: two `Idempotency-Key`s were keyed on their join, so a retry
/// carrying either one alone spent again. Two of any of these are 400, before anything reads them. So are two `Host`s
/// (RFC 9112 §3.2 says a server must refuse them): the first becomes the request's authority, and one left among the
/// fields is a second.
struct SingleHeadersMiddleware: RouterMiddleware {
    typealias Context = AppRequestContext

    static let names: [HTTPField.Name] = [.authorization, .idempotencyKey, .contentType, .contentLength, .stripeSignature]

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if let repeated = Self.repeated(request.headers) {
            throw Problem.validation("The \(repeated.canonicalName) header must be sent once.")
        }
        return try await next(request, context)
    }

    /// The first of ``names`` that `headers` carry more than once (one pass, no allocation).
    static func repeated(_ headers: HTTPFields) -> HTTPField.Name? {
        var seen = 0
        for field in headers {
            if field.name == .host { return field.name }
            guard let index = names.firstIndex(of: field.name) else { continue }
            let bit = 1 << index
            if seen & bit != 0 { return field.name }
            seen |= bit
        }
        return nil
    }
}
