// swift-tools-version:6.1
import Foundation
import PackageDescription

/// The node's connection fuzz target: a libFuzzer executable, outside the root package's build and tests.
/// Built by `Fuzz/run-connection.sh`; see the header of `Sources/CachetConnectionFuzz/CachetConnectionFuzz.swift`.
///
/// It depends on the Cachet package two levels up, or on the one at `CACHET_SOURCE` when that is set (another
/// checkout of the project, such as a worktree at an older commit, fuzzed with this same target).
let source = URL(
    fileURLWithPath: Context.environment["CACHET_SOURCE"] ?? "../..",
    relativeTo: URL(fileURLWithPath: Context.packageDirectory, isDirectory: true)
).standardizedFileURL
/// SwiftPM names a package that is depended on by path after its folder.
let sourceIdentity = source.lastPathComponent.lowercased()

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "CachetConnectionFuzz",
    dependencies: [
        .package(path: source.path),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    ],
    targets: [
        // libFuzzer's driver entry point, declared for Swift.
        .target(name: "CLibFuzzer"),
        .executableTarget(
            name: "CachetConnectionFuzz",
            dependencies: [
                "CLibFuzzer",
                .product(name: "CachetNode", package: sourceIdentity),
                .product(name: "CachetWire", package: sourceIdentity),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
