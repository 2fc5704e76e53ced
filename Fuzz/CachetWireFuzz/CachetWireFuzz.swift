// A libFuzzer target for the wire codec: the frame decoder, the body decoders, the request and reply
// decoders. Built and run by `Fuzz/run.sh`, never by the root package's `swift build` or `swift test`.
//
// Every input is read twice: as a stream of requests and as a stream of replies. The harness does not
// only wait for a crash; it checks, for every input:
//
// 1. No decoder reads outside the bytes it was given: the input lies in an allocation of exactly its
//    size, and while it is fed one byte at a time the bytes not yet "received" are poisoned, so that
//    AddressSanitizer stops at the first read past the end of what has arrived.
// 2. Every frame, error and "need more" agrees with an independent reading of the specification
//    (`Protocol/PROTOCOL.md`, "Frames" and "Error handling"): offsets, header fields, body range,
//    error code, status, and whether the error closes the connection.
// 3. Splitting does not matter: fed one byte at a time (which passes through every split point), the
//    decoder yields the same frames and the same error as from the whole input, and reports each frame
//    exactly when its last byte arrives and a bad length exactly when the 4th byte of its prefix arrives,
//    so a receiver never buffers any of a payload whose declared length is out of range.
// 4. Re-encoding a decoded valid request gives back its bytes (with the reserved flags zeroed, but a
//    leased PUT's lease flag); a decoded reply re-encodes to exactly its bytes; CLEAR reply, EVENT and lease
//    reply bodies round-trip. Requests cover every opcode: PUT (leased too, and parts), GET (of a range too), DEL, CLEAR (with key
//    prefixes too), STATS, PING, AUTH, WATCH and UNWATCH.
// 5. The in-place decoders (frame, header, PUT, key) allocate nothing when they succeed.
//
// A violated property stops the process with a message (`fatalError`), which libFuzzer records as a
// crash with the input that caused it.

import CachetWire

#if canImport(Glibc)
import Glibc
#endif

// MARK: - Sanitizer hooks, found at run time so that the harness also links without them

private typealias PoisonFunction = @convention(c) (UnsafeRawPointer?, Int) -> Void
private typealias MallocHook = @convention(c) (UnsafeRawPointer?, Int) -> Void
private typealias FreeHook = @convention(c) (UnsafeRawPointer?) -> Void
private typealias InstallHooksFunction = @convention(c) (MallocHook?, FreeHook?) -> CInt

private func sanitizerSymbol<T>(_ name: String, as type: T.Type) -> T? {
    guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else { return nil }
    return unsafeBitCast(symbol, to: type)
}

// libFuzzer runs inputs on one thread; these globals are written only from it (the malloc hook only
// reads `countingThread` and increments `allocations` when it runs on that thread).
nonisolated(unsafe) private var poison: PoisonFunction?
nonisolated(unsafe) private var unpoison: PoisonFunction?
nonisolated(unsafe) private var counting = false
nonisolated(unsafe) private var countingThread: pthread_t = 0
nonisolated(unsafe) private var allocations = 0
nonisolated(unsafe) private var hooksInstalled = false

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(
    _ argc: UnsafeMutablePointer<CInt>?,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>?
) -> CInt {
    poison = sanitizerSymbol("__asan_poison_memory_region", as: PoisonFunction.self)
    unpoison = sanitizerSymbol("__asan_unpoison_memory_region", as: PoisonFunction.self)
    countingThread = pthread_self()
    allocations = 0
    counting = false
    if let install = sanitizerSymbol("__sanitizer_install_malloc_and_free_hooks", as: InstallHooksFunction.self) {
        let onMalloc: MallocHook = { _, _ in
            if counting && pthread_equal(pthread_self(), countingThread) != 0 { allocations &+= 1 }
        }
        hooksInstalled = install(onMalloc, nil) != 0
    }
    return 0
}

/// Runs `body` and fails when it allocated on this thread (only where the sanitizer offers malloc hooks).
@inline(__always)
private func withoutAllocation<R, E: Error>(_ what: StaticString, _ body: () throws(E) -> R) throws(E) -> R {
    allocations = 0
    counting = true
    let result: R
    do {
        result = try body()
    } catch {
        counting = false
        throw error
    }
    counting = false
    if hooksInstalled && allocations != 0 {
        fatalError("\(what) allocated \(allocations) times on success")
    }
    return result
}

// MARK: - An independent reading of the specification

private func bigEndian(_ bytes: UnsafeRawBufferPointer, _ offset: Int, _ count: Int) -> Int {
    var value = 0
    for index in offset..<(offset + count) { value = value << 8 | Int(bytes[index]) }
    return value
}

/// What the decoder must report at `offset` of `bytes`, per the specification.
private enum ExpectedFrame: Equatable {
    case needMore
    case fatal(CachetWireError.Code)
    case frame(end: Int)
}

private func expectedFrame(in bytes: UnsafeRawBufferPointer, at offset: Int, limit: Int) -> ExpectedFrame {
    let available = bytes.count - offset
    guard available >= 4 else { return .needMore }
    let length = bigEndian(bytes, offset, 4)
    if length < 8 { return .fatal(.payloadTooShort) }
    if length > limit { return .fatal(.payloadTooLarge) }
    guard available - 4 >= length else { return .needMore }
    return .frame(end: offset + 4 + length)
}

/// The outcome of a request frame per "Error handling", steps 2 to 5.
private enum ExpectedRequest: Equatable {
    case error(CachetWireError.Code)
    case put(ttl: Int, key: Range<Int>, value: Range<Int>)
    /// A PUT with the lease flag: its token before the PUT body ("Leases").
    case leasedPut(token: UInt64, ttl: Int, key: Range<Int>, value: Range<Int>)
    case key(Range<Int>)
    /// A GET with the range flag: the key, then offset and length ("GET of a range").
    case rangedKey(Range<Int>, offset: UInt64, length: UInt64)
    case empty
    /// A CLEAR naming key prefixes.
    case clearPrefixes([Range<Int>])
    case auth(user: Range<Int>, secret: Range<Int>)
    case watch(options: UInt8, maximumValue: Int, run: UInt64, sequence: UInt64, prefix: Range<Int>)
}

private func expectedRequest(
    in bytes: UnsafeRawBufferPointer,
    frameAt offset: Int,
    end: Int,
    checkingVersion: Bool = true,
    checkingParts: Bool = true
) -> ExpectedRequest {
    let version = bytes[offset + 4]
    let opcode = bytes[offset + 5]
    let body = (offset + 12)..<end
    if version != 1 && checkingVersion { return .error(.unsupportedVersion) }
    if opcode == 0 || opcode > 9 { return .error(.unknownOpcode) }
    func keyLengthProblem(_ keyLength: Int) -> CachetWireError.Code? {
        if keyLength == 0 { return .emptyKey }
        if keyLength > 4096 { return .keyTooLong }
        return nil
    }
    let leased = bytes[offset + 7] & 0x40 != 0
    switch opcode {
    case 1:
        let start = body.lowerBound + (leased ? 8 : 0)
        if leased && body.count < 8 { return .error(.malformedBody) }
        guard end - start >= 6 else { return .error(.malformedBody) }
        let keyLength = bigEndian(bytes, start + 4, 2)
        if let problem = keyLengthProblem(keyLength) { return .error(problem) }
        let keyStart = start + 6
        guard keyStart + keyLength <= end else { return .error(.malformedBody) }
        let (ttl, key, value) = (
            bigEndian(bytes, start, 4), keyStart..<(keyStart + keyLength), (keyStart + keyLength)..<end
        )
        if checkingParts && bytes[offset + 6] & 0x20 != 0 {
            // A part ("PUT in parts"): no lease; upload id, length and offset, then bytes within the length.
            guard !leased, value.count >= 24 else { return .error(.malformedBody) }
            let total = UInt64(truncatingIfNeeded: bigEndian(bytes, value.lowerBound + 8, 8))
            let partOffset = UInt64(truncatingIfNeeded: bigEndian(bytes, value.lowerBound + 16, 8))
            guard partOffset <= total, UInt64(value.count - 24) <= total - partOffset else {
                return .error(.malformedBody)
            }
        }
        guard leased else { return .put(ttl: ttl, key: key, value: value) }
        return .leasedPut(
            token: UInt64(truncatingIfNeeded: bigEndian(bytes, body.lowerBound, 8)),
            ttl: ttl,
            key: key,
            value: value
        )
    case 4 where !body.isEmpty:
        var prefixes: [Range<Int>] = []
        var position = body.lowerBound
        while position < end {
            guard prefixes.count < 64, end - position >= 2 else { return .error(.malformedBody) }
            let length = bigEndian(bytes, position, 2)
            guard (1...4096).contains(length), position + 2 + length <= end else { return .error(.malformedBody) }
            prefixes.append((position + 2)..<(position + 2 + length))
            position += 2 + length
        }
        return .clearPrefixes(prefixes)
    case 7:
        guard body.count >= 2 else { return .error(.malformedBody) }
        let userLength = bigEndian(bytes, body.lowerBound, 2)
        let userStart = body.lowerBound + 2
        guard (1...255).contains(userLength), userStart + userLength <= end, end - (userStart + userLength) <= 1024
        else {
            return .error(.malformedBody)
        }
        return .auth(user: userStart..<(userStart + userLength), secret: (userStart + userLength)..<end)
    case 8:
        guard body.count >= 21, bytes[body.lowerBound] & ~1 == 0, body.count - 21 <= 4096 else {
            return .error(.malformedBody)
        }
        return .watch(
            options: bytes[body.lowerBound],
            maximumValue: bigEndian(bytes, body.lowerBound + 1, 4),
            run: UInt64(truncatingIfNeeded: bigEndian(bytes, body.lowerBound + 5, 8)),
            sequence: UInt64(truncatingIfNeeded: bigEndian(bytes, body.lowerBound + 13, 8)),
            prefix: (body.lowerBound + 21)..<end
        )
    case 2 where bytes[offset + 6] & 0x10 != 0:
        guard body.count >= 18 else { return .error(.malformedBody) }
        let keyLength = bigEndian(bytes, body.lowerBound, 2)
        if let problem = keyLengthProblem(keyLength) { return .error(problem) }
        guard body.count == 18 + keyLength else { return .error(.malformedBody) }
        let rangeStart = end - 16
        return .rangedKey(
            (body.lowerBound + 2)..<rangeStart,
            offset: UInt64(truncatingIfNeeded: bigEndian(bytes, rangeStart, 8)),
            length: UInt64(truncatingIfNeeded: bigEndian(bytes, rangeStart + 8, 8))
        )
    case 2, 3:
        guard body.count >= 2 else { return .error(.malformedBody) }
        let keyLength = bigEndian(bytes, body.lowerBound, 2)
        if let problem = keyLengthProblem(keyLength) { return .error(problem) }
        guard body.count == 2 + keyLength else { return .error(.malformedBody) }
        return .key((body.lowerBound + 2)..<end)
    default:
        return body.isEmpty ? .empty : .error(.malformedBody)
    }
}

private func expectedStatus(_ code: CachetWireError.Code) -> CachetStatus {
    switch code {
    case .payloadTooLarge, .keyTooLong: return .tooLarge
    case .unsupportedVersion: return .unsupportedVersion
    case .unknownOpcode: return .unknownOpcode
    default: return .badRequest
    }
}

private func check(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError(message()) }
}

private func checkError(
    _ error: CachetWireError,
    is code: CachetWireError.Code,
    fatal: Bool,
    _ context: @autoclosure () -> String
) {
    check(error.code == code, "\(context()): expected \(code), decoder threw \(error)")
    check(error.status == expectedStatus(code), "\(context()): \(error) answers \(error.status)")
    check(error.closesConnection == fatal, "\(context()): \(error) closesConnection \(error.closesConnection)")
    check(!error.message.isEmpty, "\(context()): \(error.code) without a message")
}

// MARK: - Decoding a stream

/// One step of a decoded stream.
private enum Event: Equatable {
    case frame(CachetFrame)
    case fatal(CachetWireError.Code)
}

/// Decodes frames from `offset` while whole ones are available; appends what it finds to `events`.
/// Returns the offset of the first frame not decoded and whether a fatal error ended the stream.
private func decodeAvailable(
    _ bytes: UnsafeRawBufferPointer,
    from offset: Int,
    limit: Int,
    into events: inout [Event]
) -> (offset: Int, stopped: Bool) {
    var offset = offset
    while true {
        let expected = expectedFrame(in: bytes, at: offset, limit: limit)
        // Built only when a check fails: formatting it for every byte fed would dominate the run time.
        var context: String { "frame at \(offset) of \(bytes.count) bytes, limit \(limit)" }
        do {
            let frame = try withoutAllocation("decodeFrame") { () throws(CachetWireError) in
                try CachetFrameDecoder.decodeFrame(in: bytes, at: offset, maximumPayloadLength: limit)
            }
            guard let frame else {
                check(expected == .needMore, "\(context): decoder needs more bytes, expected \(expected)")
                return (offset, false)
            }
            guard case .frame(let end) = expected else {
                fatalError("\(context): decoder found a frame ending at \(frame.end), expected \(expected)")
            }
            check(frame.end == end, "\(context): frame ends at \(frame.end), expected \(end)")
            check(frame.body == (offset + 12)..<end, "\(context): body \(frame.body), expected \(offset + 12)..<\(end)")
            let header = frame.header
            check(header.version == bytes[offset + 4], "\(context): version \(header.version)")
            check(header.opcode.rawValue == bytes[offset + 5], "\(context): opcode \(header.opcode)")
            check(Int(header.word) == bigEndian(bytes, offset + 6, 2), "\(context): word \(header.word)")
            check(Int(header.id) == bigEndian(bytes, offset + 8, 4), "\(context): id \(header.id)")
            let alone = withoutAllocation("decodeHeader") { CachetFrameDecoder.decodeHeader(in: bytes, at: offset) }
            check(alone == header, "\(context): decodeHeader gives \(String(describing: alone)), decodeFrame \(header)")
            events.append(.frame(frame))
            offset = frame.end
        } catch {
            guard case .fatal(let code) = expected else {
                fatalError("\(context): decoder threw \(error), expected \(expected)")
            }
            checkError(error, is: code, fatal: true, context)
            events.append(.fatal(code))
            return (offset, true)
        }
    }
}

/// Checks the header reader on its own: it needs 12 bytes and checks nothing else.
private func checkHeaderAlone(_ bytes: UnsafeRawBufferPointer, at offset: Int) {
    let header = withoutAllocation("decodeHeader") { CachetFrameDecoder.decodeHeader(in: bytes, at: offset) }
    if bytes.count - offset < 12 {
        check(header == nil, "decodeHeader at \(offset) of \(bytes.count) bytes returned a header")
    } else {
        guard let header else { fatalError("decodeHeader at \(offset) of \(bytes.count) bytes returned nil") }
        check(
            header.version == bytes[offset + 4] && header.opcode.rawValue == bytes[offset + 5]
                && Int(header.word) == bigEndian(bytes, offset + 6, 2)
                && Int(header.id) == bigEndian(bytes, offset + 8, 4),
            "decodeHeader at \(offset) read \(header)"
        )
    }
}

/// Decodes a request frame in place and as a command, against the specification; re-encodes valid ones.
private func checkRequest(_ frame: CachetFrame, in bytes: UnsafeRawBufferPointer) {
    let offset = frame.body.lowerBound - 12
    var context: String { "request at \(offset)" }
    let expected = expectedRequest(in: bytes, frameAt: offset, end: frame.end)
    let command: CachetCommand
    do {
        command = try CachetCommand.decode(frame: frame, in: bytes)
    } catch {
        guard case .error(let code) = expected else {
            fatalError("\(context): CachetCommand.decode threw \(error), expected \(expected)")
        }
        checkError(error, is: code, fatal: false, context)
        checkInPlace(frame, in: bytes, context)
        return
    }
    checkInPlace(frame, in: bytes, context)
    let frameBytes = Array(bytes[offset..<frame.end])
    switch (command, expected) {
    case (.put(let key, let value, let ttl), .put(let expectedTTL, let keyRange, let valueRange)):
        check(
            Int(ttl) == expectedTTL && key.elementsEqual(bytes[keyRange]) && value.elementsEqual(bytes[valueRange]),
            "\(context): PUT decoded wrong"
        )
    case (.rangedGet(let key, let range), .rangedKey(let keyRange, let rangeOffset, let rangeLength)):
        check(
            key.elementsEqual(bytes[keyRange]) && range.offset == rangeOffset && range.length == rangeLength,
            "\(context): ranged GET decoded wrong"
        )
    case (.get(let key), .key(let keyRange)):
        check(bytes[offset + 5] == 2 && key.elementsEqual(bytes[keyRange]), "\(context): GET decoded wrong")
    case (.delete(let key), .key(let keyRange)):
        check(bytes[offset + 5] == 3 && key.elementsEqual(bytes[keyRange]), "\(context): DEL decoded wrong")
    case (
        .leasedPut(let key, let value, let ttl, let token),
        .leasedPut(let expectedToken, let expectedTTL, let keyRange, let valueRange)
    ):
        check(
            token == expectedToken && Int(ttl) == expectedTTL && key.elementsEqual(bytes[keyRange])
                && value.elementsEqual(bytes[valueRange]),
            "\(context): leased PUT decoded wrong"
        )
    case (.clear, .empty), (.stats, .empty), (.ping, .empty), (.unwatch, .empty):
        check(command.opcode.rawValue == bytes[offset + 5], "\(context): decoded as \(command.opcode)")
    case (.clearPrefixes(let prefixes), .clearPrefixes(let ranges)):
        check(prefixes.elementsEqual(ranges.map { Array(bytes[$0]) }), "\(context): CLEAR prefixes decoded wrong")
    case (.auth(let user, let secret), .auth(let userRange, let secretRange)):
        check(
            user.elementsEqual(bytes[userRange]) && secret.elementsEqual(bytes[secretRange]),
            "\(context): AUTH decoded wrong"
        )
    case (.watch(let request), .watch(let options, let maximumValue, let run, let sequence, let prefix)):
        check(
            request.includesValues == (options & 1 != 0) && Int(request.maximumValueLength) == maximumValue
                && (request.resumingAfter?.run ?? 0) == run && (request.resumingAfter?.sequence ?? 0) == sequence
                && request.prefix.elementsEqual(bytes[prefix]),
            "\(context): WATCH decoded as \(request)"
        )
    default:
        fatalError("\(context): decoded as \(command), expected \(expected)")
    }
    // The node ignores the reserved flags, and an encoder writes 0 (but a leased PUT its lease flag).
    var withoutFlags = frameBytes
    withoutFlags[6] = 0
    withoutFlags[7] = 0
    if case .leasedPut = command { withoutFlags[7] = 0x40 }
    if case .rangedGet = command { withoutFlags[6] = 0x10 }
    let reencoded = command.encoded(id: frame.header.id)
    check(reencoded == withoutFlags, "\(context): re-encoding gives different bytes")
}

/// The in-place body decoders the node's hot path uses: the outcome the specification gives the body
/// (whatever the version byte), ranges inside the body, no allocation on success.
private func checkInPlace(_ frame: CachetFrame, in bytes: UnsafeRawBufferPointer, _ context: @autoclosure () -> String)
{
    let offset = frame.body.lowerBound - 12
    let opcode = bytes[offset + 5]
    guard opcode >= 1 && opcode <= 6 else { return }
    // The PUT body's decoder reads a PUT's fields whatever the flags; a part's field is checked on its own.
    let expected = expectedRequest(in: bytes, frameAt: offset, end: frame.end, checkingVersion: false, checkingParts: false)
    do throws(CachetWireError) {
        switch opcode {
        case 1:
            let leased = frame.header.flags & 0x40 != 0
            let (put, token) = try withoutAllocation("decodePut") { () throws(CachetWireError) in
                try CachetBodyDecoder.decodePut(in: bytes, body: frame.body, leased: leased)
            }
            if frame.header.flags & CachetRequestFlags.part.rawValue != 0 && !leased {
                // "PUT in parts": the value field is upload id, length and offset, then bytes within the length.
                let whole = expectedRequest(in: bytes, frameAt: offset, end: frame.end, checkingVersion: false)
                let part = try? CachetUploadPart.decode(in: bytes, value: put.value)
                if case .error = whole {
                    check(part == nil, "\(context()): CachetUploadPart.decode took \(String(describing: part))")
                } else {
                    check(part?.bytes == (put.value.lowerBound + 24)..<put.value.upperBound, "\(context()): part \(String(describing: part))")
                }
            }
            switch expected {
            case .put(let ttl, let key, let value) where !leased:
                check(
                    Int(put.ttl) == ttl && put.key == key && put.value == value,
                    "\(context()): decodePut found \(put)"
                )
            case .leasedPut(let expectedToken, let ttl, let key, let value) where leased:
                check(
                    token == expectedToken && Int(put.ttl) == ttl && put.key == key && put.value == value,
                    "\(context()): leased decodePut found \(put)"
                )
            default:
                fatalError("\(context()): decodePut found \(put), expected \(expected)")
            }
        case 4:
            let prefixes = try CachetBodyDecoder.decodeClear(in: bytes, body: frame.body)
            switch expected {
            case .empty: check(prefixes.isEmpty, "\(context()): decodeClear found prefixes in an empty body")
            case .clearPrefixes(let ranges):
                check(
                    prefixes.elementsEqual(ranges.map { Array(bytes[$0]) }),
                    "\(context()): decodeClear found \(prefixes)"
                )
            default: fatalError("\(context()): decodeClear found \(prefixes), expected \(expected)")
            }
        case 7:
            let (user, secret) = try CachetBodyDecoder.decodeAuth(in: bytes, body: frame.body)
            check(expected == .auth(user: user, secret: secret), "\(context()): decodeAuth found \(user) \(secret)")
        case 8:
            let request = try CachetWatchRequest(decoding: bytes, body: frame.body)
            guard case .watch(_, _, _, _, let prefix) = expected else {
                fatalError("\(context()): WATCH decoded as \(request), expected \(expected)")
            }
            check(request.prefix.elementsEqual(bytes[prefix]), "\(context()): WATCH prefix \(request.prefix)")
        case 2 where frame.header.flags & 0x1000 != 0:
            let (key, range) = try withoutAllocation("decodeRangedKey") { () throws(CachetWireError) in
                try CachetBodyDecoder.decodeRangedKey(in: bytes, body: frame.body)
            }
            check(
                expected == .rangedKey(key, offset: range.offset, length: range.length),
                "\(context()): decodeRangedKey found \(key) \(range), expected \(expected)"
            )
        case 2, 3:
            let key = try withoutAllocation("decodeKey") { () throws(CachetWireError) in
                try CachetBodyDecoder.decodeKey(in: bytes, body: frame.body)
            }
            check(expected == .key(key), "\(context()): decodeKey found \(key), expected \(expected)")
        default:
            try CachetBodyDecoder.decodeEmpty(body: frame.body)
            check(expected == .empty, "\(context()): decodeEmpty accepted \(frame.body.count) bytes")
        }
    } catch {
        guard case .error(let code) = expected else {
            fatalError("\(context()): in-place decoder threw \(error), expected \(expected)")
        }
        checkError(error, is: code, fatal: false, context())
    }
}

/// Decodes a reply frame as a client does; re-encodes it; reads a CLEAR reply body.
private func checkReply(_ frame: CachetFrame, in bytes: UnsafeRawBufferPointer, limit: Int) {
    let offset = frame.body.lowerBound - 12
    var context: String { "reply at \(offset)" }
    let decoded: (response: CachetResponse, end: Int)?
    do {
        decoded = try CachetResponse.decode(from: bytes, at: offset, maximumPayloadLength: limit)
    } catch {
        fatalError("\(context): CachetResponse.decode threw \(error) where decodeFrame found a frame")
    }
    guard let (response, end) = decoded else { fatalError("\(context): CachetResponse.decode needs more bytes") }
    check(end == frame.end, "\(context): reply ends at \(end), frame at \(frame.end)")
    check(response.encoded.elementsEqual(bytes[offset..<end]), "\(context): reply re-encodes differently")
    check(response.status.rawValue == frame.header.word, "\(context): status \(response.status)")
    _ = response.status.description
    _ = response.opcode.description
    _ = response.bodyText
    // An EVENT body and a lease reply are read without trusting their lengths.
    if let event = try? CachetEvent(decoding: response.body) {
        let keyLength = bigEndian(bytes, frame.body.lowerBound + 14, 2)
        check(
            event.key.elementsEqual(bytes[(frame.body.lowerBound + 16)..<(frame.body.lowerBound + 16 + keyLength)]),
            "\(context): EVENT key"
        )
        if let value = event.value {
            check(16 + event.key.count + value.count == response.body.count, "\(context): EVENT read as \(event)")
        }
        // Defined flags only, and no bytes the flags do not account for: the event is its bytes exactly.
        if response.body[1] & ~3 == 0 && (event.value != nil || response.body.count == 16 + keyLength) {
            check(
                event.encoded(id: response.id).dropFirst(12).elementsEqual(response.body),
                "\(context): EVENT re-encodes differently"
            )
        }
    }
    if let lease = CachetLeaseReply(decoding: response.body) {
        check(lease.encoded == response.body, "\(context): lease reply re-encodes differently")
    }
    do {
        let clear = try CachetClearResult(decoding: response.body)
        check(response.body.count == 16, "\(context): CLEAR reply of \(response.body.count) bytes accepted")
        check(clear.encoded == response.body, "\(context): CLEAR reply re-encodes differently")
        check(
            clear.items == UInt64(truncatingIfNeeded: bigEndian(bytes, frame.body.lowerBound, 8))
                && clear.bytes == UInt64(truncatingIfNeeded: bigEndian(bytes, frame.body.lowerBound + 8, 8)),
            "\(context): CLEAR reply read as \(clear)"
        )
    } catch {
        check(response.body.count != 16, "\(context): CLEAR reply of 16 bytes refused: \(error)")
        check(error.code == .malformedReply, "\(context): CLEAR reply refused with \(error)")
    }
}

// MARK: - The entry point

/// A small limit as well as the default one, so that ordinary inputs also reach the TOO_LARGE path.
private let limits = [CachetProtocol.defaultMaximumPayloadLength, 300]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    // An allocation of exactly the input's size: a read past its end is a heap overflow for ASan.
    let storage = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 1)
    defer { storage.deallocate() }
    if size > 0, let data { storage.copyMemory(from: UnsafeRawBufferPointer(start: data, count: size)) }
    let bytes = UnsafeRawBufferPointer(storage)

    var eventsAtFirstLimit: [Event] = []
    for limit in limits {
        // Whole.
        var whole: [Event] = []
        let (rest, stopped) = decodeAvailable(bytes, from: 0, limit: limit, into: &whole)
        // A smaller limit that changes nothing (every frame fits it) gives nothing new to feed byte by byte.
        if limit == limits[0] {
            eventsAtFirstLimit = whole
        } else if whole == eventsAtFirstLimit {
            continue
        }
        check(CachetFrameDecoder.decodeHeader(in: bytes, at: size) == nil, "decodeHeader at the end returned a header")
        if !stopped {
            check(
                (try? CachetFrameDecoder.decodeFrame(in: bytes, at: size, maximumPayloadLength: limit)) == nil,
                "at end"
            )
        }
        checkHeaderAlone(bytes, at: rest)
        if limit == limits[0] {
            for event in whole {
                guard case .frame(let frame) = event else { continue }
                checkRequest(frame, in: bytes)
                checkReply(frame, in: bytes, limit: limit)
            }
        }

        // One byte at a time, with the bytes not yet received poisoned: the same events, each as soon
        // as its last byte is in (so a bad length is reported from its prefix alone).
        if let poison, unpoison != nil, size > 0 { poison(storage.baseAddress, size) }
        var dripped: [Event] = []
        var offset = 0
        var ended = false
        for received in 0...size {
            if received > 0, let unpoison { unpoison(storage.baseAddress! + (received - 1), 1) }
            guard !ended else { continue }
            let prefix = UnsafeRawBufferPointer(rebasing: bytes[0..<received])
            let before = dripped.count
            (offset, ended) = decodeAvailable(prefix, from: offset, limit: limit, into: &dripped)
            for event in dripped[before...] {
                switch event {
                case .frame(let frame):
                    check(frame.end == received, "a frame ending at \(frame.end) reported only at \(received) bytes")
                case .fatal:
                    check(offset + 4 == received, "a bad length at \(offset) reported only at \(received) bytes")
                }
            }
        }
        if let unpoison, size > 0 { unpoison(storage.baseAddress, size) }
        check(dripped == whole, "one byte at a time gives \(dripped.count) events, whole \(whole.count)")
        check(offset == rest, "one byte at a time stops at \(offset), whole at \(rest)")
    }
    return 0
}
