// swift-tools-version:6.1
import PackageDescription

/// Hummingbird's persist driver on CachetClient. Its own package, so that Cachet's core keeps its small set
/// of dependencies: it depends on the repository's package by path, as an app would on a release.
let package = Package(
    name: "cachet-hummingbird",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "CachetHummingbird", targets: ["CachetHummingbird"])
    ],
    dependencies: [
        .package(name: "cachet", path: "../.."),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth", from: "2.5.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
    ],
    targets: [
        .target(
            name: "CachetHummingbird",
            dependencies: [
                .product(name: "CachetClient", package: "cachet"),
                .product(name: "Hummingbird", package: "hummingbird"),
            ],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        ),
        .testTarget(
            name: "CachetHummingbirdTests",
            dependencies: [
                "CachetHummingbird",
                .product(name: "CachetClient", package: "cachet"),
                .product(name: "CachetTestSupport", package: "cachet"),
                .product(name: "cachet-node", package: "cachet"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdAuth", package: "hummingbird-auth"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        ),
    ]
)
