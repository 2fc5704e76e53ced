// swift-tools-version:6.1
import PackageDescription

// A small Vapor app on CachetVapor: a slow handler's result cached in Cachet, sessions kept there.
//   swift run --package-path Examples/VaporApp CachetVaporExample
// It depends on the driver's package by path, as an app would on a release.
let package = Package(
    name: "cachet-vapor-example",
    platforms: [.macOS(.v13)],
    dependencies: [
        .package(name: "cachet", path: "../.."),
        .package(name: "CachetVapor", path: "../../Integrations/CachetVapor"),
        .package(url: "https://github.com/vapor/vapor", from: "4.122.3"),
    ],
    targets: [
        .executableTarget(
            name: "CachetVaporExample",
            dependencies: [
                .product(name: "CachetClient", package: "cachet"),
                .product(name: "CachetVapor", package: "CachetVapor"),
                .product(name: "Vapor", package: "vapor"),
            ],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        )
    ]
)
