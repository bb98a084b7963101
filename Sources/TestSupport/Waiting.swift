/// Waits until `condition` holds, checking it every `every` for at most `within`; returns whether it held. Tests wait on
/// a condition instead of sleeping a fixed time, so a loaded machine gets room and a quick one does not wait; the bound
/// turns a condition that never holds into a failed check instead of a hung run.
@discardableResult
public func waitUntil(
    within: Duration = .seconds(30), every: Duration = .milliseconds(10), _ condition: () async throws -> Bool
) async throws -> Bool {
    let deadline = ContinuousClock.now + within
    while try await !condition() {
        guard ContinuousClock.now < deadline else { return false }
        try await Task.sleep(for: every)
    }
    return true
}
