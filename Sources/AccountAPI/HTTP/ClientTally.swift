/// What is held in all and by each client, and the most held at once since memory was last given back: request bodies'
/// bytes (``BodyBudget``) and open connections (``ClientConnections``). Kept under its owner's lock.
struct ClientTally {
    private(set) var total = 0
    private var peak = 0
    private var places: [String: Int] = [:]

    /// Clients holding something now.
    var clients: Int { places.count }

    /// Whether `client` holds fewer than `max` places.
    func hasRoom(_ client: String, max: Int) -> Bool { places[client, default: 0] < max }

    /// Takes one of `client`'s places ("": none, only the total counts) and `amount` of the total.
    mutating func take(_ amount: Int, client: String) {
        if !client.isEmpty { places[client, default: 0] += 1 }
        add(amount)
    }

    mutating func add(_ amount: Int) {
        total += amount
        peak = Swift.max(peak, total)
    }

    mutating func give(_ amount: Int, client: String) {
        total -= amount
        guard !client.isEmpty else { return }
        let left = places[client, default: 1] - 1
        places[client] = left > 0 ? left : nil
    }

    /// True once after at least `from` was held at once and a quarter or less of that still is: the moment to give the
    /// memory back.
    mutating func takeTrimDue(from: Int) -> Bool {
        guard peak >= from, total <= peak / 4 else { return false }
        peak = total
        return true
    }
}
