// swift-tools-version:6.1
import PackageDescription

// A small Hummingbird app on CachetHummingbird: a slow handler's result cached in Cachet.
//   swift run --package-path Examples/HummingbirdApp CachetHummingbirdExample
// It depends on the driver's package by path, as an app would on a release.
let package = Package(
    name: "cachet-hummingbird-example",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(name: "cachet", path: "../.."),
        .package(name: "CachetHummingbird", path: "../../Integrations/CachetHummingbird"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth", from: "2.5.0"),
    ],
    targets: [
        .executableTarget(
            name: "CachetHummingbirdExample",
            dependencies: [
                .product(name: "CachetClient", package: "cachet"),
                .product(name: "CachetHummingbird", package: "CachetHummingbird"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdAuth", package: "hummingbird-auth"),
            ],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        )
    ]
)
