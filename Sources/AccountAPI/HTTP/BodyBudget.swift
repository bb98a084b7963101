import Hummingbird
import NIOCore
import Networks
import Synchronization

/// What request bodies still being read may hold. A body's bytes stay in memory until its last byte arrives, and a client
/// may send them as slowly as it likes: an outside tester held 1,200 connections, each 1 MB into a 1 MB body, and grew
/// the process from 418 MB to 1.6 GB without signing in. Every body is read through ``Request/readBody(upTo:context:)``;
/// one over ``trackedFrom`` bytes holds here what it has sent (``firstReservation`` before its first byte, then doubling
/// as it arrives, never past its declared `Content-Length` or the route's limit):
/// - past the process's budget (`HTTP_BODY_BUFFER_MIB`): 503 `unavailable` with `Retry-After`, the rest unread;
/// - past one client's concurrent body reads (`HTTP_BODY_READS_PER_CLIENT`; an IPv4 address or an IPv6 /64): 429
///   `rate_limited`;
/// - one not arrived within `HTTP_BODY_TIMEOUT_SECONDS`: 408, and its reservation is freed (a body of a few KiB trickled
///   a byte at a time would otherwise hold its share for as long as the idle timeout keeps being met).
/// The reservation ends when the body has been read (or refused); what a handler then keeps is bounded by the requests
/// it is running. A smaller body reserves nothing but is held to the same time limit, checked as each part arrives (no
/// timer on the hot paths). How no request acts on credentials checked before its body arrived: ``BodyBudgetMiddleware``.
final class BodyBudget: Sendable {
    let bytesMax: Int
    let readsPerClientMax: Int
    let timeout: Duration
    /// Bodies up to this size are read as they come: the API's JSON bodies (a spend's is a few hundred bytes), so the hot
    /// paths take no lock, and all the connections the process may open (20,000 descriptors) hold at most 80 MiB of them.
    static let trackedFrom = 4 * 1024
    /// What a tracked body reserves before its first byte (or its declared size, if smaller); it grows as the body
    /// arrives.
    static let firstReservation = 64 * 1024
    /// Bytes reserved, and bodies being read per client.
    private let state = Mutex(ClientTally())

    /// Past this many bytes in flight at once, the memory they held is given back to the system once they are read
    /// (``MemoryReturn``): the allocator keeps freed pages for reuse, so a spike would otherwise stay in the process's size.
    static let trimFrom = 32 << 20

    enum Refusal: Equatable {
        case full
        case client
    }

    init(bytesMax: Int, readsPerClientMax: Int, timeoutSeconds: Int) {
        (self.bytesMax, self.readsPerClientMax, self.timeout) = (bytesMax, readsPerClientMax, .seconds(timeoutSeconds))
    }

    /// Takes `bytes` for one body of `client`'s; nil when taken, else why not (nothing taken).
    func reserve(_ bytes: Int, client: String) -> Refusal? {
        state.withLock { state in
            guard state.hasRoom(client, max: readsPerClientMax) else { return .client }
            guard bytes <= bytesMax - state.total else { return .full }
            state.take(bytes, client: client)
            return nil
        }
    }

    /// Adds `bytes` to a body's reservation as more of it arrives; false when the process's budget has no room (nothing
    /// taken).
    func grow(by bytes: Int) -> Bool {
        state.withLock { state in
            guard bytes <= bytesMax - state.total else { return false }
            state.add(bytes)
            return true
        }
    }

    func release(_ bytes: Int, client: String) {
        state.withLock { $0.give(bytes, client: client) }
    }

    /// True once after a spike of at least ``trimFrom`` bytes has mostly been read (a quarter or less still in flight):
    /// the moment to give the memory back.
    func takeTrimDue() -> Bool { state.withLock { $0.takeTrimDue(from: Self.trimFrom) } }

    /// Bytes reserved and clients reading now (tests, metrics).
    var inUse: (bytes: Int, clients: Int) { state.withLock { ($0.total, $0.clients) } }
}

/// Hands every request the process's ``BodyBudget``, and makes sure no request acts on credentials checked before its
/// body arrived: handlers authenticate before they decode, and a body trickled in after its headers let revoked
/// sessions and keys write (a reviewer held requests open past a password reset; an outside tester granted tokens with
/// a revoked key by sending the body chunked, or padded past 64 KiB). A body that declares at most ``readFirstMax``
/// bytes (the API's JSON and forms) is read before any handler runs; any other body (chunked, larger, uploads) is read
/// by its handler, after which the request's credentials are checked again (``Request/readBody(upTo:context:)``).
struct BodyBudgetMiddleware: RouterMiddleware {
    typealias Context = AppRequestContext
    let budget: BodyBudget
    /// ``Authenticator/recheck(_:_:)``.
    let recheck: @Sendable (RequestCredentials, AppRequestContext) async throws -> Void
    /// Every JSON and form body the API takes fits (a spend's is at most 64 KiB).
    static let readFirstMax = 64 << 10

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        context.bodies = budget
        let declared = request.headers[.contentLength].flatMap { Int($0) }
        if declared == nil && request.headers[.transferEncoding] == nil || declared == 0 {
            context.preReadBody = ByteBuffer()  // no body
            return try await next(request, context)
        }
        guard let declared, declared <= Self.readFirstMax else {
            context.credentials = RequestCredentials(recheck: recheck)
            return try await next(request, context)
        }
        var request = request
        context.preReadBody = try await request.readBody(upTo: declared, context: context)
        return try await next(request, context)
    }
}

extension Request {
    /// The body, at most `limit` bytes (`NIOTooManyBytesError` beyond, as Hummingbird's `collectBody`), read within the
    /// process's ``BodyBudget`` (see there for the refusals).
    /// A body read here (not before the handler) may have arrived long after the request was authenticated: its
    /// credentials are checked again once it is in (``BodyBudgetMiddleware``).
    mutating func readBody(upTo limit: Int, context: AppRequestContext) async throws -> ByteBuffer {
        if let body = context.preReadBody {
            guard body.readableBytes <= limit else { throw NIOTooManyBytesError(maxBytes: limit) }
            return body
        }
        let body = try await readBody(upTo: limit, budget: context.bodies, client: context.clientIP)
        try await context.credentials?.recheck(context)
        return body
    }

    mutating func readBody(upTo limit: Int, budget: BodyBudget?, client: String) async throws -> ByteBuffer {
        let declared = headers[.contentLength].flatMap { Int($0) }
        if let declared, declared > limit { throw NIOTooManyBytesError(maxBytes: limit) }
        let bytes = declared ?? limit
        guard let budget, bytes > BodyBudget.trackedFrom else { return try await collectBody(upTo: limit, within: budget?.timeout ?? .seconds(60)) }
        let client = IPNetwork.client(client)  // an IPv6 client's whole /64 is one client
        let held = HeldBytes(min(bytes, BodyBudget.firstReservation))
        switch budget.reserve(held.bytes, client: client) {
        case .full?:
            throw Problem.unavailable("The server is receiving too many request bodies at once; try again shortly.", retryAfterSeconds: 1)
        case .client?:
            throw Problem(
                .tooManyRequests, code: "rate_limited",
                detail: "Too many request bodies from this address are still arriving; finish or close them first."
            )
            .retryAfter(seconds: 1)
        case nil: break
        }
        defer { budget.release(held.bytes, client: client) }
        let body = self.body
        let timeout = budget.timeout
        let buffer = try await withThrowingTaskGroup(of: ByteBuffer?.self) { group in
            group.addTask { try await Self.collect(body, upTo: limit, holding: held, in: budget) }
            group.addTask {
                try await Task.sleep(for: timeout)
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let buffer = first else { throw Self.late(timeout) }
            return buffer
        }
        self.body = RequestBody(buffer: buffer)
        return buffer
    }

    /// The body's parts, its reservation grown as they arrive (doubling, at most to `limit`): what a body holds of the
    /// budget is what it has sent, so bodies that send a few bytes and stall cannot fill it (an outside tester's
    /// 256 chunked uploads from eight addresses did, reserving the route's whole limit each). Past the budget: 503.
    private static func collect(_ body: RequestBody, upTo limit: Int, holding held: HeldBytes, in budget: BodyBudget) async throws -> ByteBuffer {
        var collected = ByteBuffer()
        for try await part in body {
            let size = collected.readableBytes + part.readableBytes
            guard size <= limit else { throw NIOTooManyBytesError(maxBytes: limit) }
            if size > held.bytes {
                let more = min(limit, max(size, held.bytes * 2)) - held.bytes
                guard budget.grow(by: more) else {
                    throw Problem.unavailable("The server is receiving too many request bodies at once; try again shortly.", retryAfterSeconds: 1)
                }
                held.add(more)
            }
            collected.writeImmutableBuffer(part)
        }
        return collected
    }

    /// Hummingbird's `collectBody(upTo:)`, refused with 408 when a part arrives after `timeout` (a body that stops
    /// arriving altogether meets the connection's idle timeout instead).
    private mutating func collectBody(upTo limit: Int, within timeout: Duration) async throws -> ByteBuffer {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        var collected: ByteBuffer?
        for try await part in body {
            guard ContinuousClock.now < deadline else { throw Self.late(timeout) }
            guard (collected?.readableBytes ?? 0) + part.readableBytes <= limit else { throw NIOTooManyBytesError(maxBytes: limit) }
            if collected == nil { collected = part } else { collected?.writeImmutableBuffer(part) }
        }
        let buffer = collected ?? ByteBuffer()
        self.body = RequestBody(buffer: buffer)
        return buffer
    }

    static func late(_ timeout: Duration) -> Problem {
        Problem(
            .requestTimeout, code: "request_timeout",
            detail: "The request body did not arrive within \(timeout.components.seconds) s; send it again at a steady pace.")
    }
}

/// What one body being read holds of the ``BodyBudget``: grown by its reader as parts arrive, given back by whoever
/// reserved it once the read is over (the reader is a child task that has ended by then).
final class HeldBytes: Sendable {
    private let held: Mutex<Int>
    init(_ bytes: Int) { held = Mutex(bytes) }
    var bytes: Int { held.withLock { $0 } }
    func add(_ bytes: Int) { held.withLock { $0 += bytes } }
}

/// The credentials a request was authenticated with, recorded by ``Authenticator`` (and the console's gate) for a body
/// its handler reads, and checked again once that body is in. Only what was used is checked: a public route that
/// ignores a stale `Authorization` header is not refused for it.
final class RequestCredentials: Sendable {
    enum Used: Sendable {
        /// A bearer session, and the profile it acted as.
        case session(token: String, profileID: String?)
        case apiKey(secret: String)
        case console(token: String)
    }

    private let used = Mutex<[Used]>([])
    private let check: @Sendable (RequestCredentials, AppRequestContext) async throws -> Void

    init(recheck: @escaping @Sendable (RequestCredentials, AppRequestContext) async throws -> Void) { self.check = recheck }

    func record(_ credential: Used) { used.withLock { $0.append(credential) } }

    var all: [Used] { used.withLock { $0 } }

    func recheck(_ context: AppRequestContext) async throws {
        if !all.isEmpty { try await check(self, context) }
    }
}
