import HTTPTypes
import Hummingbird
import Synchronization

/// The methods each route path answers, filled once the router is built, so that a known path asked with another method
/// answers 405 with `Allow` rather than 404.
final class AllowedMethods: Sendable {
    private let routes = Mutex<[(path: RouterPath, method: HTTPRequest.Method)]>([])

    /// Records every route of `router` (call after the last route is added).
    func record(_ router: Router<AppRequestContext>) {
        let described = router.routes.map { (path: $0.path, method: $0.method) }
        routes.withLock { $0 = described }
    }

    /// The methods routed for `path`, sorted; empty when no route has this path.
    func methods(for path: String) -> [String] {
        let segments = path.split(separator: "/", omittingEmptySubsequences: true)
        let matching = routes.withLock { routes in
            routes.filter { route in
                route.path.components.count == segments.count && zip(route.path.components, segments).allSatisfy { $0 ~= $1 }
            }.map(\.method.rawValue)
        }
        return Array(Set(matching)).sorted()
    }
}
