// swift-tools-version:6.1
import PackageDescription

/// Vapor's cache and sessions drivers on CachetClient. Its own package, so that Cachet's core keeps its small
/// set of dependencies: it depends on the repository's package by path, as an app would on a release.
let package = Package(
    name: "cachet-vapor",
    platforms: [.macOS(.v13)],
    products: [
        .library(name: "CachetVapor", targets: ["CachetVapor"])
    ],
    dependencies: [
        .package(name: "cachet", path: "../.."),
        .package(url: "https://github.com/vapor/vapor", from: "4.122.3"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
    ],
    targets: [
        .target(
            name: "CachetVapor",
            dependencies: [
                .product(name: "CachetClient", package: "cachet"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Vapor", package: "vapor"),
            ],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        ),
        .testTarget(
            name: "CachetVaporTests",
            dependencies: [
                "CachetVapor",
                .product(name: "CachetClient", package: "cachet"),
                .product(name: "CachetTestSupport", package: "cachet"),
                .product(name: "cachet-node", package: "cachet"),
                .product(name: "VaporTesting", package: "vapor"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        ),
    ]
)
