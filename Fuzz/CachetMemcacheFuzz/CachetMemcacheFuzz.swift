// A libFuzzer target for the decoder of memcached's text protocol (CachetMemcache). Built and run by
// `Fuzz/run-memcache.sh`, never by the root package's `swift build` or `swift test`.
//
// Every input is decoded as a stream of commands, and for each one the harness checks:
// 1. No read outside the input (AddressSanitizer; the input lies in an allocation of exactly its size).
// 2. Progress and bounds: every command or failure ends past where it started and within the input.
// 3. Splitting: every prefix of the bytes a command took decodes as "need more" (or, past 2048 bytes with
//    no line end, as a line too long), never as another command.
// 4. `decodeGetLine`, the path of `get` and `gets` lines alone, finds what `decode` finds for them.
// 5. What a command holds agrees with its line: keys are 1 to 250 bytes with no control character, inside
//    the line (a meta command's base64 key, up to 344); a storage command's (and `ms`'s) data block starts
//    right after the line's `\n` and is followed by `\r\n`; a meta command's flags lie inside the line, each
//    once.
// A failure that swallows a data block (a value too large, a storage line with a bad field) may end past
// the input: the rest is discarded as it arrives.
// A violated property stops the process with a message (`fatalError`), which libFuzzer records as a crash.

import CachetMemcache

#if canImport(Glibc)
import Glibc
#endif

private func check(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError(message()) }
}

private func isKey(_ range: Range<Int>, _ bytes: UnsafeRawBufferPointer, line: Range<Int>) -> Bool {
    guard (1...250).contains(range.count), line.contains(range.lowerBound), range.upperBound <= line.upperBound else {
        return false
    }
    return range.allSatisfy { bytes[$0] > 0x20 && bytes[$0] != 0x7f }
}

private func checkCommand(_ command: MemcacheTextCommand, _ bytes: UnsafeRawBufferPointer, from start: Int, to end: Int)
{
    var newline = start
    while bytes[newline] != UInt8(ascii: "\n") { newline += 1 }
    let line = start..<newline
    switch command {
    case .store(_, let key, _, _, let data, _, _):
        check(isKey(key, bytes, line: line), "store: a bad key \(key)")
        check(
            data.lowerBound == newline + 1 && data.upperBound + 2 == end,
            "store: data \(data), line end \(newline), end \(end)"
        )
        check(bytes[data.upperBound] == 13 && bytes[data.upperBound + 1] == 10, "store: data not followed by CRLF")
    case .retrieve(let keys, _, _):
        let ranges = Array(keys.ranges(in: bytes))
        check(
            ranges.count == keys.count && ranges.allSatisfy { isKey($0, bytes, line: line) },
            "retrieve: bad keys \(ranges), \(keys.count) counted"
        )
        check(
            ranges.first?.lowerBound == keys.span.lowerBound && ranges.last?.upperBound == keys.span.upperBound,
            "retrieve: keys \(ranges) outside their span \(keys.span)"
        )
        check(end == newline + 1, "retrieve: end \(end), line end \(newline)")
    case .delete(let key, _), .arithmetic(_, let key, _, _), .touch(let key, _, _):
        check(isKey(key, bytes, line: line), "\(command): a bad key")
        check(end == newline + 1, "\(command): end \(end), line end \(newline)")
    case .stats(let argument):
        check(
            argument.map { line.contains($0.lowerBound) && $0.upperBound <= line.upperBound } ?? true,
            "stats: argument"
        )
        check(end == newline + 1, "stats: end")
    case .flushAll, .version, .verbosity, .quit, .cacheMemoryLimit:
        check(end == newline + 1, "\(command): end \(end), line end \(newline)")
    case .meta(let meta):
        if meta.kind == .noop {
            check(meta.key.isEmpty && meta.flags.isEmpty, "mn: a key or flags")
        } else if meta.has("b") {
            check(
                (1...344).contains(meta.key.count) && line.contains(meta.key.lowerBound)
                    && meta.key.upperBound <= line.upperBound,
                "meta: a bad base64 key \(meta.key)"
            )
        } else {
            check(isKey(meta.key, bytes, line: line), "meta: a bad key \(meta.key)")
        }
        var letters = Set<UInt8>()
        for flag in meta.flags {
            check(letters.insert(flag.letter).inserted, "meta: flag \(flag.letter) twice")
            check(
                flag.token.lowerBound > meta.key.upperBound && flag.token.upperBound <= line.upperBound
                    && bytes[flag.token.lowerBound - 1] == flag.letter,
                "meta: flag \(flag.letter) outside the line"
            )
        }
        if let data = meta.data {
            check(meta.kind == .set, "meta: data on \(meta.kind)")
            check(data.lowerBound == newline + 1 && data.upperBound + 2 == end, "ms: data \(data), end \(end)")
            check(bytes[data.upperBound] == 13 && bytes[data.upperBound + 1] == 10, "ms: data not followed by CRLF")
        } else {
            check(meta.kind != .set && end == newline + 1, "meta: \(meta.kind) without data, end \(end)")
        }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    var offset = 0
    while offset < size {
        let decoded = MemcacheTextDecoder.decode(bytes, at: offset, maximumValueLength: 4096)
        // The path of `get` lines alone agrees with the general one wherever it finds a line.
        if let line = MemcacheTextDecoder.decodeGetLine(bytes, at: offset) {
            let expected = MemcacheTextDecoding.command(
                .retrieve(keys: line.keys, withCAS: line.withCAS, touch: nil),
                end: line.end
            )
            check(decoded == expected, "decodeGetLine at \(offset): \(line), decode: \(decoded)")
        } else if case .command(.retrieve(_, _, nil), _) = decoded {
            // Only a line that starts with spaces is left to the general path.
            check(bytes[offset] == 0x20, "a get at \(offset) that decodeGetLine did not find: \(decoded)")
        }
        let end: Int
        switch decoded {
        case .needMore:
            return 0
        case .command(let command, let found):
            end = found
            check(end > offset && end <= size, "command \(command) at \(offset) ends at \(end) of \(size)")
            checkCommand(command, bytes, from: offset, to: end)
        case .failure(let error, let found, _):
            end = found
            check(end > offset, "failure \(error) at \(offset) ends at \(end)")
            // A value too large, or a storage line with a bad field, is refused before its block arrives: the
            // rest is discarded.
            if case .tooLarge(let key?) = error {
                check(isKey(key, bytes, line: offset..<min(size, end)), "a set too large names a bad key \(key)")
            }
            if case .tooLarge = error, end > size { return 0 }
            if error == .badFormat && end > size { return 0 }
            check(end <= size, "failure \(error) at \(offset) ends at \(end) of \(size)")
            if error.closesConnection { return 0 }
        }
        // Every prefix of what it took needs more (or, without a line end past the limit, is too long), up to
        // its line's end: past it, a failure that swallows a data block is decided already.
        var lineEnd = offset
        while lineEnd < end && bytes[lineEnd] != UInt8(ascii: "\n") { lineEnd += 1 }
        var decided = end
        if case .failure = decoded { decided = min(end, lineEnd + 1) }
        for cut in offset..<decided {
            let prefix = UnsafeRawBufferPointer(rebasing: bytes[0..<cut])
            switch MemcacheTextDecoder.decode(prefix, at: offset, maximumValueLength: 4096) {
            case .needMore: break
            case .failure(.lineTooLong, _, _): break
            case let other:
                fatalError(
                    "a prefix of \(cut - offset) bytes at \(offset) decoded as \(other), the whole as \(decoded)"
                )
            }
        }
        offset = end
    }
    return 0
}
