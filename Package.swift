// swift-tools-version:6.1
import PackageDescription

/// One set of compiler settings for every target: Swift 6 language mode with strict concurrency,
/// and `any` spelled out for existentials so that none sneaks onto a hot path unnoticed.
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "cachet",
    products: [
        .executable(name: "cachet-node", targets: ["cachet-node"]),
        .executable(name: "cachet-cli", targets: ["cachet-cli"]),
        .executable(name: "cachet-bench", targets: ["cachet-bench"]),
        .library(name: "CachetWire", targets: ["CachetWire"]),
        .library(name: "CachetStore", targets: ["CachetStore"]),
        .library(name: "CachetRing", targets: ["CachetRing"]),
        .library(name: "CachetCluster", targets: ["CachetCluster"]),
        .library(name: "CachetNode", targets: ["CachetNode"]),
        .library(name: "CachetIO", targets: ["CachetIO"]),
        .library(name: "CachetClient", targets: ["CachetClient"]),
        // For the tests of packages built on this one (Integrations/): real node processes, waiting
        // without holding the task pool.
        .library(name: "CachetTestSupport", targets: ["CachetTestSupport"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.2.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
    ],
    targets: [
        // C shims and system libraries.
        .target(name: "CEpoll"),
        .target(name: "CMalloc"),
        .target(name: "CChecksum"),
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),
        .systemLibrary(name: "COpenSSLCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),

        // The package's one lock type (a pthread mutex, which ThreadSanitizer sees).
        .target(name: "CachetLocking", swiftSettings: swiftSettings),

        // The wire codec: frames and bodies, no I/O.
        .target(name: "CachetWire", swiftSettings: swiftSettings),

        // memcached's text protocol: commands decoded in place, no I/O (the memcached front end's codec).
        .target(name: "CachetMemcache", swiftSettings: swiftSettings),

        // HTTP/1.1 request heads and response heads, byte ranges and credentials: no I/O (the codec of the
        // node's HTTP port).
        .target(name: "CachetHTTP", dependencies: ["CachetWire"], swiftSettings: swiftSettings),

        // The consistent-hash ring: XXH64, owners and preference lists, no I/O.
        .target(name: "CachetRing", swiftSettings: swiftSettings),

        // The transport: addresses, connect and listen, the byte buffer, the epoll event loop on Dispatch
        // sources hosting inbound and outbound channels, timers, TLS (OpenSSL). Below the node, the client
        // and the tools.
        .target(name: "CachetIO", dependencies: ["CEpoll", "CachetLocking", "COpenSSL"], swiftSettings: swiftSettings),

        // Users, roles and key prefixes: the auth file, salted secret hashes, what a user may do, the limit
        // on failed attempts; no I/O but reading the file.
        .target(
            name: "CachetAuth",
            dependencies: ["CachetWire", "COpenSSLCrypto"],
            swiftSettings: swiftSettings
        ),

        // Cluster membership: the cluster file, its members and their ring, the membership hash; no I/O but
        // reading the file.
        .target(name: "CachetCluster", dependencies: ["CachetRing"], swiftSettings: swiftSettings),

        // Memory and disk tiers: no sockets.
        .target(
            name: "CachetStore",
            dependencies: [
                "CachetLocking",
                "CChecksum",
                "CZlib",
                "COpenSSLCrypto",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),

        // The Dispatch-sources server: connections, request dispatch, stats.
        .target(
            name: "CachetNode",
            dependencies: [
                "CachetAuth",
                "CachetLocking",
                "CachetWire",
                "CachetMemcache",
                "CachetHTTP",
                "CachetStore",
                "CachetCluster",
                "CachetRing",
                "CachetIO",
                "CMalloc",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),

        // The client library: routes keys by the ring over pools of multiplexed connections per node.
        .target(
            name: "CachetClient",
            dependencies: [
                "CachetLocking",
                "CachetWire",
                "CachetRing",
                "CachetCluster",
                "CachetIO",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),

        // The debugging client's command language, formatting and blocking connection.
        .target(name: "CachetCLIKit", dependencies: ["CachetWire", "CachetIO"], swiftSettings: swiftSettings),

        // The load generator: event loops, protocol drivers for Cachet, memcached and Redis, reports.
        .target(
            name: "CachetBenchKit",
            dependencies: [
                "CachetLocking",
                "CachetIO",
                "CachetClient",
                "CachetCluster",
                "CachetWire",
                "CachetRing",
                .product(name: "Histogram", package: "hdrhistogram-swift"),
            ],
            swiftSettings: swiftSettings
        ),

        // Thin executables.
        .executableTarget(
            name: "cachet-node",
            dependencies: [
                "CachetAuth",
                "CachetNode",
                "CachetIO",
                "CachetClient",
                "CachetWire",
                "CachetHTTP",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "cachet-cli",
            dependencies: [
                "CachetAuth",
                "CachetCLIKit",
                "CachetIO",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "cachet-bench",
            dependencies: [
                "CachetBenchKit",
                "CachetIO",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),

        // Tests: one target per module, shared helpers in a support target.
        .target(
            name: "CachetTestSupport",
            dependencies: [
                "CachetLocking", "CachetWire", "CachetIO",
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CachetAuthTests",
            dependencies: ["CachetAuth", "CachetWire"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CachetLockingTests",
            dependencies: ["CachetLocking"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CachetWireTests",
            dependencies: ["CachetWire", "CachetTestSupport"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CachetMemcacheTests",
            dependencies: ["CachetMemcache"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CachetHTTPTests",
            dependencies: ["CachetHTTP", "CachetWire"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CachetRingTests",
            dependencies: ["CachetRing", "CachetTestSupport"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CachetClusterTests",
            dependencies: [
                "CachetCluster", "CachetIO", "CachetRing", "CachetTestSupport", "cachet-node", "cachet-cli",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CachetStoreTests",
            dependencies: ["CachetStore", "CachetLocking", "CachetTestSupport"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CachetNodeTests",
            dependencies: [
                "CachetAuth", "CachetNode", "CachetCluster", "CachetIO", "CachetWire", "CachetStore", "CachetLocking",
                "CachetTestSupport", "cachet-node",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CachetIOTests",
            dependencies: ["CachetIO", "CEpoll", "CachetLocking", "CachetTestSupport"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CachetClientTests",
            dependencies: [
                "CachetAuth", "CachetClient", "CachetCluster", "CachetIO", "CachetRing", "CachetWire",
                "CachetTestSupport", "cachet-node",
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CachetCLIKitTests",
            dependencies: ["CachetCLIKit", "CachetIO", "CachetTestSupport", "cachet-cli", "cachet-node"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CachetBenchKitTests",
            dependencies: [
                "CachetBenchKit", "CachetIO", "CachetRing", "CachetWire", "CachetTestSupport", "cachet-bench",
                "cachet-node",
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
