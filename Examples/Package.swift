// swift-tools-version:6.1
import PackageDescription

// A consumer of the CachetClient library, built against this repository by path.
let package = Package(
    name: "cachet-examples",
    dependencies: [
        .package(name: "cachet", path: "..")
    ],
    targets: [
        .executableTarget(
            name: "CachetClientExample",
            dependencies: [.product(name: "CachetClient", package: "cachet")]
        ),
        .executableTarget(
            name: "CachetWatchExample",
            dependencies: [.product(name: "CachetClient", package: "cachet")]
        ),
        .executableTarget(
            name: "CachetReadThroughExample",
            dependencies: [.product(name: "CachetClient", package: "cachet")]
        ),
    ]
)
