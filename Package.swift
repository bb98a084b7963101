// swift-tools-version:6.1
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "account-service",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "account-service", targets: ["AccountService"]),
        .executable(name: "account-service-images", targets: ["AccountServiceImages"]),
    ],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/vapor/sqlite-nio.git", from: "1.13.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
        // OpenTelemetry traces over OTLP/HTTP (the gRPC exporter is not built).
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0", traits: ["OTLPHTTP"]),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
    ],
    targets: [
        .systemLibrary(
            name: "CArgon2",
            pkgConfig: "libargon2",
            providers: [.apt(["libargon2-dev"]), .brew(["argon2"])]
        ),
        // libvips (images: sniffing, thumbnails, lossless re-encoding) and plain C wrappers over its variadic API.
        .systemLibrary(name: "CVips", pkgConfig: "vips", providers: [.apt(["libvips-dev"]), .brew(["vips"])]),
        .target(name: "CVipsSupport", dependencies: ["CVips"]),
        // Media: image rules, the image worker's client, the blob store, signed expiring URLs. No database, no libvips.
        .target(
            name: "Media",
            dependencies: [.product(name: "Crypto", package: "swift-crypto"), .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        // libvips behind Media's types; linked only by the image worker and the tests.
        .target(name: "MediaImages", dependencies: ["Media", "CVipsSupport"], swiftSettings: swiftSettings),
        // The image worker: a separate program the service runs per image (the service never loads libvips).
        .executableTarget(name: "AccountServiceImages", dependencies: ["Media", "MediaImages"], swiftSettings: swiftSettings),
        // A C function for SQLite's variadic configuration call (the query planner stability guarantee).
        // The one door for JSON from outside: a scan that refuses what traps Foundation's decoder, then JSONDecoder.
        .target(name: "SafeJSON", swiftSettings: swiftSettings),
        // Passkeys: the WebAuthn relying party's checks, with the bounded CBOR and COSE decoding they need (no Swift
        // WebAuthn package is available) and swift-crypto for the signatures. No database: Auth keeps the credentials.
        .target(
            name: "WebAuthn",
            dependencies: [
                "SafeJSON", .product(name: "Crypto", package: "swift-crypto"), .product(name: "CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(name: "CSQLiteSupport"),
        // Storage: one small SQL interface over PostgreSQL (postgres-nio) and SQLite (sqlite-nio),
        // the transaction helper and the migrations runner.
        .target(
            name: "Storage",
            dependencies: [
                "CSQLiteSupport", "Clock", "Traces",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "SQLiteNIO", package: "sqlite-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),
        // Spans through swift-distributed-tracing, off unless OTEL_EXPORTER_OTLP_ENDPOINT is set (then swift-otel exports them).
        .target(name: "Traces", dependencies: [.product(name: "Tracing", package: "swift-distributed-tracing")], swiftSettings: swiftSettings),
        // Time: the injectable clock every timestamp comes from, and the one ISO 8601 format of every answer and event.
        .target(name: "Clock", swiftSettings: swiftSettings),
        // Ports every module records through inside its own transaction: domain events (the outbox, owned by Webhooks) and
        // the audit trail (owned by Auth). Implementations are handed to modules at wiring.
        .target(name: "Events", dependencies: ["Storage", "Clock"], swiftSettings: swiftSettings),
        // Secrets that must be recovered (TOTP, webhook endpoint secrets), sealed under a key derived from the server secret.
        .target(name: "Secrets", dependencies: [.product(name: "Crypto", package: "swift-crypto")], swiftSettings: swiftSettings),
        // IP networks in CIDR notation: trusted proxies, budget keys by network, the webhook address policy.
        .target(name: "Networks", swiftSettings: swiftSettings),
        // Mail out: the message, its transports (a file per message, sendmail, the log) and the queue that sends after the
        // answer. What the messages say is their owners' (Auth's `Mails`).
        .target(
            name: "Mail",
            dependencies: [
                "Clock", "Traces",
                .product(name: "Logging", package: "swift-log"), .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "Auth",
            dependencies: [
                "Mail", "Clock", "Events", "Networks", "Secrets", "CArgon2", "Storage", "Traces", "WebAuthn",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "Ledger",
            dependencies: ["Clock", "Events", "Storage", .product(name: "Logging", package: "swift-log"), .product(name: "Metrics", package: "swift-metrics")],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "Entitlements",
            dependencies: [
                "Clock", "Events", "Storage", "Ledger", "SafeJSON", .product(name: "Logging", package: "swift-log"), .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),
        // Payments from outside: Apple's signed transactions and notifications (the X.509 chain to the configured roots)
        // and Stripe's signed events, each taking effect once through Entitlements' subscription machine and the ledger.
        .target(
            name: "Billing",
            dependencies: [
                "Clock", "Entitlements", "Storage", "Ledger", "SafeJSON", "AppStoreServer", "Events", .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"), .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"), .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),
        // Events out: the transactional outbox every module writes its events to, the webhook endpoints and the leased
        // delivery worker (async-http-client), signed per the Standard Webhooks spec.
        .target(
            name: "Webhooks",
            dependencies: [
                "Clock", "Events", "Networks", "Secrets", "Storage", "Traces", .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"), .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),
        // Identity tokens from other issuers (Sign in with Apple): jwt-kit verifies, async-http-client fetches the key set.
        .target(
            name: "Identity",
            dependencies: [
                .product(name: "JWTKit", package: "jwt-kit"), .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"), .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"), .product(name: "Logging", package: "swift-log"), "SafeJSON",
            ],
            swiftSettings: swiftSettings
        ),
        // Apple's App Store Server API, outbound (as Apple's app-store-server-library): ES256 tokens (jwt-kit), async-http-client,
        // retries. Answers' signed payloads are verified by Billing; no tables.
        .target(
            name: "AppStoreServer",
            dependencies: [
                .product(name: "JWTKit", package: "jwt-kit"), .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"), "SafeJSON",
            ],
            swiftSettings: swiftSettings
        ),
        // HTTP: Hummingbird controllers (one per file), middleware, problems, configuration and the wiring that builds the
        // application from the domain services. Tests import this library; the executable only adds the command line.
        .target(
            name: "AccountAPI",
            dependencies: [
                "Mail", "Clock", "Networks", "Secrets", "Events", "Auth", "Ledger", "Entitlements", "Billing", "Storage", "Media", "Webhooks", "Identity", "SafeJSON",
                "Traces", "WebAuthn", "AppStoreServer", .product(name: "OTel", package: "swift-otel"), .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Mustache", package: "swift-mustache"),
            ],
            swiftSettings: swiftSettings
        ),
        // The executable: a thin main (the command line) around AccountAPI.
        .executableTarget(
            name: "AccountService",
            dependencies: [
                "Mail", "Clock", "AccountAPI", "Auth", "Ledger", "Entitlements", "Storage", "Media",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // Helpers shared by the test targets: a fresh database per test on either engine.
        .target(
            name: "TestSupport",
            dependencies: [
                "Clock", "Storage", .product(name: "PostgresNIO", package: "postgres-nio"), .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"), .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"), .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(name: "StorageTests", dependencies: ["Clock", "Storage", "TestSupport", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"), .product(name: "PostgresNIO", package: "postgres-nio"), .product(name: "NIOSSL", package: "swift-nio-ssl"), .product(name: "Logging", package: "swift-log")], swiftSettings: swiftSettings),
        .testTarget(
            name: "WebAuthnTests",
            dependencies: ["WebAuthn", "TestSupport", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: swiftSettings),
        .testTarget(name: "AuthTests", dependencies: ["Mail", "Clock", "Auth", "Storage", "TestSupport"], swiftSettings: swiftSettings),
        .testTarget(name: "MediaTests", dependencies: ["Media", "MediaImages"], swiftSettings: swiftSettings),
        .testTarget(name: "LedgerTests", dependencies: ["Clock", "Events", "Ledger", "Storage", "TestSupport"], swiftSettings: swiftSettings),
        .testTarget(
            name: "EntitlementsTests",
            dependencies: [
                "Mail", "Clock", "Entitlements", "Billing", "Ledger", "Storage", "TestSupport", "Auth",
                .product(name: "X509", package: "swift-certificates"), .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "AccountAPITests",
            dependencies: [
                "Mail", "Clock", "Networks", "Events", "Secrets", "AccountAPI", "Storage", "Auth", "Entitlements", "Billing", "Ledger", "TestSupport", "Media", "MediaImages", "Webhooks", "Identity", "SafeJSON",
                .product(name: "JWTKit", package: "jwt-kit"), .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "HummingbirdTesting", package: "hummingbird"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "X509", package: "swift-certificates"), .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
