/// Image work per uploader (per process): one image of each uploader in the image worker at a time, a few more
/// waiting their turn, the rest refused. Image work runs on the shared blocking pool (one thread per core): without
/// this, one account's parallel uploads of slow-to-decode images queued every other user's upload behind them (27 s
/// measured by an outside attack on 2 cores); now another user's image waits for at most one image per busy uploader.
actor ImageJobs {
    let waitingPerOwnerMax: Int
    private var busy: Set<String> = []
    private var waiting: [String: [CheckedContinuation<Void, Never>]] = [:]

    init(waitingPerOwnerMax: Int = 8) {
        self.waitingPerOwnerMax = waitingPerOwnerMax
    }

    /// Waits for `owner`'s turn; false (at once) when `owner` already has `waitingPerOwnerMax` images waiting.
    func begin(_ owner: String) async -> Bool {
        guard busy.contains(owner) else {
            busy.insert(owner)
            return true
        }
        guard waiting[owner, default: []].count < waitingPerOwnerMax else { return false }
        await withCheckedContinuation { waiting[owner, default: []].append($0) }
        return true  // the slot was handed over by `end`
    }

    /// How many of `owner`'s images wait their turn.
    func waitingCount(_ owner: String) -> Int { waiting[owner]?.count ?? 0 }

    /// Hands `owner`'s slot to its next waiting image, or frees it.
    func end(_ owner: String) {
        if var queue = waiting[owner], !queue.isEmpty {
            let next = queue.removeFirst()
            waiting[owner] = queue.isEmpty ? nil : queue
            next.resume()
        } else {
            busy.remove(owner)
        }
    }
}
