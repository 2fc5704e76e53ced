// swift-tools-version:6.1
// Micro-benchmarks for the codec, the memory tier and the ring, outside the root package's build and tests.
// Run from this directory: swift package benchmark
import Foundation
import PackageDescription

// A path dependency is named after its directory, which differs between clones.
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent

let package = Package(
    name: "cachet-benchmarks",
    platforms: [.macOS(.v13)],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "CachetMicro",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "CachetWire", package: root),
                .product(name: "CachetStore", package: root),
                .product(name: "CachetRing", package: root),
            ],
            path: "Benchmarks/CachetMicro",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        )
    ]
)
