import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Storage
import TestSupport
import Testing

@testable import AccountAPI

/// Request bodies still arriving hold memory; the process bounds what they may hold in all and per client, and how long a
/// large one may take (`scripts/attack a27` does the same against a real process with slow sockets).
@Suite("Request bodies within a budget")
struct BodyBudgetTests {
    @Test func reservationsAreBoundedInAllAndPerClientAndGiveBackWhatTheyTook() {
        let budget = BodyBudget(bytesMax: 10_000, readsPerClientMax: 2, timeoutSeconds: 1)
        #expect(budget.reserve(6_000, client: "a") == nil)
        #expect(budget.reserve(5_000, client: "b") == .full, "past the process's bytes")
        #expect(budget.reserve(4_000, client: "a") == nil)
        #expect(budget.reserve(1, client: "a") == .client, "past one client's reads, whatever the bytes")
        #expect(budget.reserve(1, client: "b") == .full)
        budget.release(6_000, client: "a")
        #expect(budget.reserve(5_000, client: "b") == nil)
        budget.release(4_000, client: "a")
        budget.release(5_000, client: "b")
        #expect(budget.inUse == (0, 0))
    }

    @Test func aTrackedBodyThatStopsArrivingIsRefusedWithinItsTimeAndGivesItsBytesBack() async throws {
        let budget = BodyBudget(bytesMax: 1 << 20, readsPerClientMax: 4, timeoutSeconds: 1)
        let (stream, feed) = AsyncStream<ByteBuffer>.makeStream()
        defer { feed.finish() }
        feed.yield(ByteBuffer(repeating: 0x61, count: 1_000))
        var request = Request(
            head: HTTPRequest(method: .post, scheme: "http", authority: "localhost", path: "/x", headerFields: [.contentLength: "10000"]),
            body: RequestBody(asyncSequence: stream))
        let started = ContinuousClock.now
        let refused = await #expect(throws: Problem.self) { _ = try await request.readBody(upTo: 1 << 20, budget: budget, client: "slow") }
        #expect(refused?.status == .requestTimeout && refused?.code == "request_timeout")
        #expect(ContinuousClock.now - started < .seconds(90), "answered, not left hanging (a loaded host delays the timer)")
        #expect(budget.inUse == (0, 0))
        // A small body is read as it comes, without a reservation; a declared length past the limit is refused unread.
        var small = Request(
            head: HTTPRequest(method: .post, scheme: "http", authority: "localhost", path: "/x", headerFields: [.contentLength: "3"]),
            body: RequestBody(buffer: ByteBuffer(string: "abc")))
        #expect(try await small.readBody(upTo: 1 << 20, budget: budget, client: "slow") == ByteBuffer(string: "abc"))
        var large = Request(
            head: HTTPRequest(method: .post, scheme: "http", authority: "localhost", path: "/x", headerFields: [.contentLength: "2000000"]),
            body: RequestBody(asyncSequence: stream))
        await #expect(throws: NIOTooManyBytesError.self) { _ = try await large.readBody(upTo: 1 << 20, budget: budget, client: "slow") }
    }

    /// A small body reserves nothing but keeps the time limit: a request authenticated before its body was trickled in
    /// past the limit is refused when its next part arrives (a reviewer held such requests for hours to outlast a
    /// reset), while parts in time and a body split across many parts are read whole.
    @Test func aSmallBodyTrickledPastTheTimeLimitIsRefused() async throws {
        let budget = BodyBudget(bytesMax: 1 << 20, readsPerClientMax: 4, timeoutSeconds: 1)
        func request(_ stream: AsyncStream<ByteBuffer>) -> Request {
            Request(
                head: HTTPRequest(method: .post, scheme: "http", authority: "localhost", path: "/x", headerFields: [.contentLength: "20"]),
                body: RequestBody(asyncSequence: stream))
        }
        let (slow, feedSlow) = AsyncStream<ByteBuffer>.makeStream()
        feedSlow.yield(ByteBuffer(string: #"{"code":"#))
        // The rest comes 2 s later: the read below starts before this sleep can end.
        let feeder = Task {
            try await Task.sleep(for: .seconds(2))
            feedSlow.yield(ByteBuffer(string: #""123456"}   "#))
            feedSlow.finish()
        }
        var held = request(slow)
        let refused = await #expect(throws: Problem.self) { _ = try await held.readBody(upTo: 4_096, budget: budget, client: "slow") }
        #expect(refused?.status == .requestTimeout && refused?.code == "request_timeout")
        try await feeder.value
        let (steady, feedSteady) = AsyncStream<ByteBuffer>.makeStream()
        for byte in #"{"code":"123456"}   "#.utf8 { feedSteady.yield(ByteBuffer(bytes: [byte])) }
        feedSteady.finish()
        held = request(steady)
        #expect(try await held.readBody(upTo: 4_096, budget: budget, client: "slow") == ByteBuffer(string: #"{"code":"123456"}   "#))
    }

    /// Memory is given back once after a spike of at least 32 MiB has mostly been read, not for small bodies, not while
    /// the spike is still arriving, and not twice for one spike.
    @Test func memoryIsGivenBackOnceAfterASpike() {
        let budget = BodyBudget(bytesMax: 256 << 20, readsPerClientMax: 100, timeoutSeconds: 30)
        for n in 0..<20 { #expect(budget.reserve(1 << 20, client: "small\(n)") == nil) }
        for n in 0..<20 { budget.release(1 << 20, client: "small\(n)") }
        #expect(!budget.takeTrimDue(), "20 MiB at most is no spike")
        for n in 0..<40 { #expect(budget.reserve(1 << 20, client: "c\(n % 4)") == nil) }
        #expect(!budget.takeTrimDue(), "still arriving")
        for n in 0..<29 { budget.release(1 << 20, client: "c\(n % 4)") }
        #expect(!budget.takeTrimDue(), "11 of 40 MiB still in flight")
        budget.release(1 << 20, client: "c1")
        #expect(budget.takeTrimDue() && !budget.takeTrimDue(), "once, at a quarter")
        for n in 30..<40 { budget.release(1 << 20, client: "c\(n % 4)") }
        #expect(!budget.takeTrimDue() && budget.inUse == (0, 0))
    }

    /// A body holds what it has sent, not what it may send: stalled chunked bodies of a few bytes each hold 64 KiB, not
    /// the route's limit (an outside tester's 256 from eight addresses filled the budget), while one that keeps arriving
    /// grows its share, is read whole, and one that outgrows the budget is refused with 503 and gives its share back.
    @Test func aBodyHoldsWhatItHasSentNotWhatItMaySend() async throws {
        let budget = BodyBudget(bytesMax: 1 << 20, readsPerClientMax: 16, timeoutSeconds: 30)
        func chunked(_ stream: AsyncStream<ByteBuffer>) -> Request {
            Request(
                head: HTTPRequest(method: .post, scheme: "http", authority: "localhost", path: "/x", headerFields: [.transferEncoding: "chunked"]),
                body: RequestBody(asyncSequence: stream))
        }
        var feeds: [AsyncStream<ByteBuffer>.Continuation] = []
        var stalled: [Task<Int, any Error>] = []
        for n in 0..<8 {
            let (stream, feed) = AsyncStream<ByteBuffer>.makeStream()
            feed.yield(ByteBuffer(repeating: 0x61, count: 10))
            feeds.append(feed)
            stalled.append(
                Task {
                    var request = chunked(stream)
                    return try await request.readBody(upTo: 1 << 20, budget: budget, client: "192.0.2.\(n)").readableBytes
                })
        }
        while budget.inUse.clients < 8 { try await Task.sleep(for: .milliseconds(5)) }
        #expect(budget.inUse.bytes == 8 * BodyBudget.firstReservation, "each stalled body holds its first 64 KiB, not 1 MiB")
        let (stream, feed) = AsyncStream<ByteBuffer>.makeStream()
        for _ in 0..<30 { feed.yield(ByteBuffer(repeating: 0x62, count: 10_000)) }
        feed.finish()
        var growing = chunked(stream)
        #expect(try await growing.readBody(upTo: 1 << 20, budget: budget, client: "198.51.100.1").readableBytes == 300_000)
        #expect(budget.inUse.bytes == 8 * BodyBudget.firstReservation, "its share is given back")
        let (big, bigFeed) = AsyncStream<ByteBuffer>.makeStream()
        for _ in 0..<60 { bigFeed.yield(ByteBuffer(repeating: 0x63, count: 10_000)) }
        bigFeed.finish()
        var tooBig = chunked(big)
        let refused = await #expect(throws: Problem.self) { _ = try await tooBig.readBody(upTo: 1 << 20, budget: budget, client: "198.51.100.2") }
        #expect(refused?.status == .serviceUnavailable && refused?.code == "unavailable")
        #expect(budget.inUse.bytes == 8 * BodyBudget.firstReservation)
        for feed in feeds {
            feed.yield(ByteBuffer(repeating: 0x61, count: 5))
            feed.finish()
        }
        for read in stalled { #expect(try await read.value == 15) }
        #expect(budget.inUse == (0, 0))
    }

    /// One client is an IPv4 address or an IPv6 /64: addresses from one /64 share its count; another /64 has its own.
    @Test func anIPv6ClientsWholeSlash64IsOneClient() async throws {
        let budget = BodyBudget(bytesMax: 1 << 20, readsPerClientMax: 1, timeoutSeconds: 30)
        func stalled(_ stream: AsyncStream<ByteBuffer>) -> Request {
            Request(
                head: HTTPRequest(method: .post, scheme: "http", authority: "localhost", path: "/x", headerFields: [.contentLength: "10000"]),
                body: RequestBody(asyncSequence: stream))
        }
        let (stream, feed) = AsyncStream<ByteBuffer>.makeStream()
        let first = Task {
            var request = stalled(stream)
            return try await request.readBody(upTo: 1 << 20, budget: budget, client: "2001:db8:1:2::1")
        }
        while budget.inUse.clients == 0 { try await Task.sleep(for: .milliseconds(5)) }
        var neighbour = stalled(AsyncStream<ByteBuffer> { _ in })
        let refused = await #expect(throws: Problem.self) {
            _ = try await neighbour.readBody(upTo: 1 << 20, budget: budget, client: "2001:db8:1:2:ffff:ffff:ffff:fffe")
        }
        #expect(refused?.status == .tooManyRequests)
        let (other, otherFeed) = AsyncStream<ByteBuffer>.makeStream()
        otherFeed.yield(ByteBuffer(repeating: 0x62, count: 10_000))
        otherFeed.finish()
        var elsewhere = stalled(other)
        let read = try await elsewhere.readBody(upTo: 1 << 20, budget: budget, client: "2001:db8:1:3::1")
        #expect(read.readableBytes == 10_000, "the next /64 is another client")
        feed.yield(ByteBuffer(repeating: 0x61, count: 10_000))
        feed.finish()
        #expect(try await first.value.readableBytes == 10_000)
        #expect(budget.inUse == (0, 0))
    }

    /// Over HTTP: while other bodies hold the whole budget, a large body is answered 503 and a client's many large bodies
    /// 429, both without reading them; small bodies (the API's JSON) go on; once they are given back all is answered.
    @Test(arguments: TestDatabase.engines)
    func theBudgetAnswersOverHTTP(engine: Engine) async throws {
        try await TestApp.run(
            engine,
            configure: {
                $0.httpBodyBufferMiB = 16; $0.httpBodyReadsPerClient = 3
            }
        ) { client, app in
            func padded(_ n: Int) -> String { #"{"email":"someone\#(n)@example.com","pad":"\#(String(repeating: "a", count: 8_000))"}"# }
            let small = #"{"email":"someone@example.com"}"#
            let budget = app.dependencies.bodies
            #expect(budget.reserve(16 << 20, client: "elsewhere") == nil)
            let full = try await client.post("/api/auth/forgot-password", json: padded(1))
            #expect(full.status == .serviceUnavailable && full.headers[.retryAfter] == "1")
            #expect(try full.problem().code == "unavailable")
            #expect(try await client.post("/api/auth/forgot-password", json: small).status == .ok)
            budget.release(16 << 20, client: "elsewhere")
            // Router tests have no socket: every request comes from the client address "unknown".
            for _ in 0..<3 { #expect(budget.reserve(1, client: "unknown") == nil) }
            let many = try await client.post("/api/auth/forgot-password", json: padded(2))
            #expect(many.status == .tooManyRequests)
            #expect(try many.problem().code == "rate_limited")
            for _ in 0..<3 { budget.release(1, client: "unknown") }
            let freed = try await client.post("/api/auth/forgot-password", json: padded(3))
            #expect(freed.status == .ok, "\(freed.status) \(String(buffer: freed.body))")
            #expect(budget.inUse == (0, 0))
        }
    }
}
