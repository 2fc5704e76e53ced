// A libFuzzer target for the node's connection state machine, through real sockets. Built and run by
// `Fuzz/run-connection.sh` as its own package (it depends on the root package by path), never by the root
// package's `swift build` or `swift test`.
//
// The process starts one node in itself (`CachetNodeServer` on 127.0.0.1, a free port, 256 MiB of memory,
// no disk tier, logging at warning) and runs every input on a fresh connection to it. An input is a small
// program (`ConnectionProgram`): up to 48 well-formed requests (PUT, GET, DEL, PING over eight keys, and
// WAIT, which holds back what follows until every earlier request is answered), the pieces their bytes are
// written in (1 byte to 4 MiB) and short pauses between pieces. Values are generated from their size, key
// and position, so an input stays a few dozen bytes while it moves megabytes: sizes sit on both sides of
// 1 KiB, 4 KiB, 8 KiB, 32 KiB, 64 KiB (the in-place PUT) and 256 KiB, and 1 MiB values make GET replies
// that pass the node's 4 MiB per-connection limit of pending replies, so the node stops reading the
// connection, drains its output and reads again, in every order the writer's splits can produce.
//
// `ConnectionRun` writes the program on a non-blocking socket while it reads the replies (one thread,
// `poll`) and checks, against a model of what the connection stored, that every request gets its reply, in
// order, with the right status and exactly the right value. A reply that has not come 5 s after the last
// byte moved is a stall. Either failure is a `fatalError` that prints the program, the replies received and
// the bytes sent, so libFuzzer saves the input; `Fuzz/run-connection.sh CRASH-FILE` replays it.
//
// Coverage comes from the node's own code (every module is built with `-sanitize=fuzzer,address`), so the
// corpus grows towards inputs that drive connections through new paths: partial frames, in-place PUTs,
// paused and resumed reading, direct sends. The node runs on its own threads, so the same input need not
// take the same path twice; a stall the fuzzer finds is worth replaying a few times (`-runs=N`).
//
// Started from the hand-made seeds without the known recipe, it found the stall fixed by commit a54a845 (a
// connection that read a full buffer, stopped reading when its output passed 4 MiB and read again within the
// same event was never told of the requests left in its socket) in 7 to 20 s, 5 s of them the stall's own
// wait, in each of four runs against the checkout before that commit; `Fuzz/README.md` says how to fuzz an
// older checkout.

import CLibFuzzer
import CachetNode
import Logging

#if canImport(Glibc)
import Glibc
#endif

// libFuzzer runs inputs one at a time on one thread; the node is started once, before the first input, and
// lives as long as the process.
nonisolated(unsafe) private var node: CachetNodeServer?
nonisolated(unsafe) private var nodePort = 0

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(
    _ argc: UnsafeMutablePointer<CInt>?,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>?
) -> CInt {
    guard node == nil else { return 0 }
    var configuration = CachetNodeConfiguration()
    configuration.host = "127.0.0.1"
    configuration.port = 0
    configuration.memoryLimit = 256 << 20
    configuration.disk = nil
    var logger = Logger(label: "cachet.fuzz.node")
    logger.logLevel = .warning
    do {
        let server = try CachetNodeServer(configuration: configuration, logger: logger)
        nodePort = try server.start()
        node = server
    } catch {
        fatalError("the node did not start: \(error)")
    }
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let program = ConnectionProgram(decoding: UnsafeRawBufferPointer(start: data, count: data == nil ? 0 : size))
    var run = ConnectionRun(program: program, port: nodePort)
    run.run()
    return 0
}
