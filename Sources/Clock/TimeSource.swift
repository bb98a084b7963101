import Foundation
import Synchronization

/// Where "now" comes from. Every timestamp the service writes is taken from here (never `now()` in SQL),
/// so tests can move time.
public protocol TimeSource: Sendable {
    func now() -> Date
}

/// The wall clock.
public struct SystemTimeSource: TimeSource {
    public init() {}
    public func now() -> Date { Date() }
}

/// A clock that tests set and advance by hand.
public final class ManualTimeSource: TimeSource {
    private let current: Mutex<Date>
    public init(_ start: Date = Date(timeIntervalSince1970: 1_800_000_000)) { self.current = Mutex(start) }
    public func now() -> Date { current.withLock { $0 } }
    public func advance(seconds: Double) { current.withLock { $0 = $0.addingTimeInterval(seconds) } }
    public func set(_ date: Date) { current.withLock { $0 = date } }
}
