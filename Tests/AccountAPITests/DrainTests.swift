import Foundation
import NIOCore
import NIOPosix
import Synchronization
import TestSupport
import Testing

@testable import AccountAPI

@Suite("Drain")
struct DrainTests {
    /// SIGTERM's first step: the listener stops accepting (connections wait in the kernel's backlog) and stays so for the
    /// pause, before the server closes it; the connections accepted before it are left alone.
    @Test func theListenerStopsAcceptingBeforeItCloses() async throws {
        let accepted = Atomic<Int>(0)
        let listener = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                accepted.add(1, ordering: .relaxed)
                return channel.eventLoop.makeSucceededVoidFuture()
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let port = try #require(listener.localAddress?.port)
        let client = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        let first = try await client.connect(host: "127.0.0.1", port: port).get()
        try #require(try await waitUntil(every: .milliseconds(5)) { accepted.load(ordering: .relaxed) == 1 })

        let state = DrainState()
        state.serving(on: listener)
        let started = ContinuousClock.now
        await state.stopAccepting()
        #expect(ContinuousClock.now - started >= .milliseconds(DrainState.acceptPauseMilliseconds))
        #expect(try await listener.getOption(ChannelOptions.autoRead).get() == false)
        #expect(first.isActive, "a connection accepted before is left alone")

        // A new connection completes in the kernel's backlog but is not accepted.
        let second = try await client.connect(host: "127.0.0.1", port: port).get()
        try await Task.sleep(for: .milliseconds(300))
        #expect(accepted.load(ordering: .relaxed) == 1)
        for channel in [first, second, listener] { try? await channel.close().get() }
    }
}
