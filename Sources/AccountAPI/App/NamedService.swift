import ServiceLifecycle

/// A service that describes itself by its type's name. ServiceLifecycle names every service by `"\(service)"` when it
/// starts the group and in its debug logs and errors; a struct's default description reflects every stored property,
/// so a service holding the ``Dependencies`` printed the whole object graph, hundreds of kilobytes per line (a test
/// process starting two hundred applications spent most of its first half-minute of CPU there, and a debug log would
/// carry whatever the graph held).
protocol NamedService: Service, CustomStringConvertible {}

extension NamedService {
    var description: String { String(describing: Self.self) }
}
