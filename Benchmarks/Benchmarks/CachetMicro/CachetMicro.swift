import Benchmark
import CachetStore
import CachetWire

let benchmarks: @Sendable () -> Void = {
    let get = CachetCommand.get(key: Array("key:0000000042".utf8)).encoded(id: 7)
    let put = CachetCommand.put(key: Array("key:0000000042".utf8), value: [UInt8](repeating: 0x61, count: 100), ttl: 0)
        .encoded(id: 7)

    Benchmark(
        "decode GET frame and key (1000 per iteration)",
        configuration: .init(metrics: [.wallClock, .mallocCountTotal, .instructions], scalingFactor: .kilo)
    ) { benchmark in
        get.withUnsafeBytes { buffer in
            for _ in benchmark.scaledIterations {
                let frame = try! CachetFrameDecoder.decodeFrame(in: buffer)!
                blackHole(try! CachetBodyDecoder.decodeKey(in: buffer, body: frame.body))
            }
        }
    }

    Benchmark(
        "decode PUT frame and body (1000 per iteration)",
        configuration: .init(metrics: [.wallClock, .mallocCountTotal, .instructions], scalingFactor: .kilo)
    ) { benchmark in
        put.withUnsafeBytes { buffer in
            for _ in benchmark.scaledIterations {
                let frame = try! CachetFrameDecoder.decodeFrame(in: buffer)!
                blackHole(try! CachetBodyDecoder.decodePut(in: buffer, body: frame.body))
            }
        }
    }

    Benchmark(
        "encode reply header (1000 per iteration)",
        configuration: .init(metrics: [.wallClock, .instructions], scalingFactor: .kilo)
    ) { benchmark in
        let output = UnsafeMutableRawPointer.allocate(byteCount: 16, alignment: 8)
        defer { output.deallocate() }
        for i in benchmark.scaledIterations {
            CachetFrameEncoder.writePrefixAndHeader(
                to: output,
                bodyLength: 100,
                header: CachetFrameHeader(opcode: .get, word: 0, id: UInt32(truncatingIfNeeded: i))
            )
            blackHole(output)
        }
    }

    let keys = (0..<100_000).map { Array("key:\(String(repeating: "0", count: 10 - String($0).count))\($0)".utf8) }
    let value = [UInt8](repeating: 0x62, count: 100)

    let full = CachetMemoryStore(configuration: CachetMemoryStoreConfiguration(memoryLimit: 1 << 30))
    for key in keys { full.put(key: key, value: value, expiry: 0, now: 1) }
    let small = CachetMemoryStore(configuration: CachetMemoryStoreConfiguration(memoryLimit: 4 << 20))

    Benchmark(
        "memory tier GET hit, 100k keys (1000 per iteration)",
        configuration: .init(metrics: [.wallClock, .mallocCountTotal, .instructions], scalingFactor: .kilo)
    ) { benchmark in
        let store = full
        for i in benchmark.scaledIterations {
            keys[i % keys.count].withUnsafeBytes { key in
                blackHole(store.withValue(forKey: key, now: 1) { value, _ in value.count })
            }
        }
    }

    Benchmark(
        "memory tier PUT with eviction (1000 per iteration)",
        configuration: .init(metrics: [.wallClock, .mallocCountTotal, .instructions], scalingFactor: .kilo)
    ) { benchmark in
        let store = small
        for i in benchmark.scaledIterations {
            keys[i % keys.count].withUnsafeBytes { key in
                value.withUnsafeBytes { value in blackHole(store.put(key: key, value: value, expiry: 0, now: 1)) }
            }
        }
    }
}
