// swift-tools-version:6.1
import PackageDescription

// A consumer of the CachetClient library, built against this repository by path.
let package = Package(
    name: "cachet-examples",
    dependencies: [
        .package(name: "cachet", path: ".."),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
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
        // The Swift snippets of README.md and docs/, compiled (never run); checked against the documents by
        // SnippetTests in the core's suite.
        .target(
            name: "CachetSnippets",
            dependencies: [
                .product(name: "CachetClient", package: "cachet"),
                .product(name: "CachetIO", package: "cachet"),
                .product(name: "CachetWire", package: "cachet"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "CachetReadThroughExample",
            dependencies: [.product(name: "CachetClient", package: "cachet")]
        ),
    ]
)
