import Benchmark
import CachetWire

/// The wire codec: decoding request frames in place, and encoding request and reply frames.
func codecBenchmarks() {
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

    let key = Array("key:0000000042".utf8)
    let value = [UInt8](repeating: 0x61, count: 100)

    Benchmark(
        "encode GET request frame in place (1000 per iteration)",
        configuration: .init(metrics: [.wallClock, .mallocCountTotal, .instructions], scalingFactor: .kilo)
    ) { benchmark in
        let output = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 8)
        defer { output.deallocate() }
        key.withUnsafeBytes { key in
            for i in benchmark.scaledIterations {
                CachetFrameEncoder.writePrefixAndHeader(
                    to: output,
                    bodyLength: CachetProtocol.keyBodyPrefixSize + key.count,
                    header: CachetFrameHeader(opcode: .get, word: 0, id: UInt32(truncatingIfNeeded: i))
                )
                output.storeBytes(
                    of: UInt16(key.count).bigEndian,
                    toByteOffset: CachetProtocol.frameOverhead,
                    as: UInt16.self
                )
                (output + CachetProtocol.frameOverhead + 2).copyMemory(from: key.baseAddress!, byteCount: key.count)
                blackHole(output)
            }
        }
    }

    Benchmark(
        "encode PUT request frame, 100 B value, in place (1000 per iteration)",
        configuration: .init(metrics: [.wallClock, .mallocCountTotal, .instructions], scalingFactor: .kilo)
    ) { benchmark in
        let output = UnsafeMutableRawPointer.allocate(byteCount: 256, alignment: 8)
        defer { output.deallocate() }
        key.withUnsafeBytes { key in
            value.withUnsafeBytes { value in
                for i in benchmark.scaledIterations {
                    CachetFrameEncoder.writePrefixAndHeader(
                        to: output,
                        bodyLength: CachetProtocol.putBodyPrefixSize + key.count + value.count,
                        header: CachetFrameHeader(opcode: .put, word: 0, id: UInt32(truncatingIfNeeded: i))
                    )
                    let body = output + CachetProtocol.frameOverhead
                    body.storeBytes(of: UInt32(0), as: UInt32.self)
                    body.storeBytes(of: UInt16(key.count).bigEndian, toByteOffset: 4, as: UInt16.self)
                    (body + 6).copyMemory(from: key.baseAddress!, byteCount: key.count)
                    (body + 6 + key.count).copyMemory(from: value.baseAddress!, byteCount: value.count)
                    blackHole(output)
                }
            }
        }
    }

    Benchmark(
        "encode PUT request into a reused [UInt8] (1000 per iteration)",
        configuration: .init(metrics: [.wallClock, .mallocCountTotal, .instructions], scalingFactor: .kilo)
    ) { benchmark in
        let command = CachetCommand.put(key: key, value: value, ttl: 0)
        var output: [UInt8] = []
        output.reserveCapacity(256)
        for i in benchmark.scaledIterations {
            output.removeAll(keepingCapacity: true)
            command.encode(id: UInt32(truncatingIfNeeded: i), to: &output)
            blackHole(output.count)
        }
    }
}
