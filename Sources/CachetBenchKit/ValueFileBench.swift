import CachetClient
import Dispatch
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What a `--value-file` run measured.
public struct ValueFileReport: Sendable {
    /// The file's length.
    public var bytes: Int
    /// Seconds to store it (``CachetClient/put(_:contentsOf:ttl:partSize:progress:)``).
    public var storeSeconds: Double
    /// Seconds to read it back into a file (``CachetClient/get(_:into:partSize:progress:)``).
    public var readSeconds: Double
    /// Whether the copy read back is byte for byte the file.
    public var identical: Bool
    /// This process's peak resident memory (`VmHWM`), in bytes.
    public var peakResidentBytes: Int

    /// One JSON object.
    public var json: String {
        "{\"bytes\":\(bytes),\"store_seconds\":\(storeSeconds),\"read_seconds\":\(readSeconds),"
            + "\"store_mb_per_second\":\(rate(storeSeconds)),\"read_mb_per_second\":\(rate(readSeconds)),"
            + "\"identical\":\(identical),\"client_peak_rss_bytes\":\(peakResidentBytes)}"
    }

    private func rate(_ seconds: Double) -> Double {
        seconds > 0 ? (Double(bytes) / 1_048_576 / seconds * 10).rounded() / 10 : 0
    }
}

/// `--value-file PATH`: one file stored under one key through ``CachetClient`` in parts, read back as a
/// stream into `PATH.read` and compared, with the client's own peak memory: what a value of any size costs
/// the client (`Benchmarks/large-values.sh`).
public enum ValueFileBench {
    /// Runs it against the first target.
    public static func run(_ configuration: BenchConfiguration, file: String, key: String) throws(BenchError)
        -> ValueFileReport
    {
        try waitForTask { () async throws(BenchError) in
            try await runAsync(configuration, file: file, key: key)
        }
    }

    static func runAsync(_ configuration: BenchConfiguration, file: String, key: String) async throws(BenchError)
        -> ValueFileReport
    {
        let target = configuration.targets[0]
        var clientConfiguration = CachetClient.Configuration(nodes: [
            CachetClient.Node(host: target.host, port: target.port)
        ])
        clientConfiguration.requestTimeout = .seconds(30)
        clientConfiguration.tls = configuration.tls
        let client: CachetClient
        do {
            client = try CachetClient(configuration: clientConfiguration)
        } catch {
            throw BenchError(.invalidConfiguration, error.description)
        }
        let copy = file + ".read"
        let started = DispatchTime.now()
        let bytes: Int
        let stored: DispatchTime
        do {
            try await client.put(key, contentsOf: URL(fileURLWithPath: file))
            stored = DispatchTime.now()
            bytes = try await client.get(key, into: URL(fileURLWithPath: copy)) ?? -1
        } catch {
            await client.shutdown()
            throw BenchError(.connectionFailed, error.description)
        }
        let read = DispatchTime.now()
        await client.shutdown()
        let identical = sameContents(file, copy)
        unlink(copy)
        return ValueFileReport(
            bytes: bytes,
            storeSeconds: Double(stored.uptimeNanoseconds - started.uptimeNanoseconds) / 1e9,
            readSeconds: Double(read.uptimeNanoseconds - stored.uptimeNanoseconds) / 1e9,
            identical: identical,
            peakResidentBytes: peakResidentBytes()
        )
    }

    /// Compares two files a megabyte at a time.
    static func sameContents(_ a: String, _ b: String) -> Bool {
        guard let first = FileHandle(forReadingAtPath: a), let second = FileHandle(forReadingAtPath: b) else {
            return false
        }
        defer {
            try? first.close()
            try? second.close()
        }
        while true {
            let left = (try? first.read(upToCount: 1 << 20)) ?? Data()
            let right = (try? second.read(upToCount: 1 << 20)) ?? Data()
            guard left == right else { return false }
            if left.isEmpty { return true }
        }
    }

    /// `VmHWM` of this process, in bytes (0 where `/proc` does not say).
    public static func peakResidentBytes() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
        for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
            let digits = line.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
            return digits * 1024
        }
        return 0
    }
}
