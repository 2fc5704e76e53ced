import CachetIO
import CachetWire

/// A connection that speaks a protocol other than the node's own: memcached's text (``MemcacheSession``) or
/// HTTP (``HTTPSession``). What it receives is turned into native requests at the start of each turn, the
/// connection's ``RequestProcessor`` serves them as it serves a binary client's input (routing, forwards,
/// users, the disk tier, all unchanged), and before each send the native replies are turned back into the
/// connection's protocol. So one command layer serves every protocol, and replies keep the order of the
/// requests whatever waits for the disk or another member.
///
/// Touched only on its connection's loop queue.
protocol TranslatingSession: AnyObject {
    /// Turns the whole requests at the front of `input` into native requests (or, for a reply sent in
    /// several native replies, asks for its next one), and consumes what it turned. Called at the start of a
    /// turn, before ``exchangeNative(with:)``.
    /// - Parameters:
    ///   - input: the bytes received.
    ///   - output: the connection's output not sent yet, all of it in the session's protocol (a session may
    ///     answer a request there itself, when nothing before it waits for a native reply).
    ///   - outputLimit: the most `output` may hold once a reply is added there.
    ///   - now: the loop's clock, in seconds.
    ///   - host: the connection's loop.
    ///   - tally: the requests answered this turn, for their latency.
    func beginTurn(
        input: inout CachetByteBuffer,
        output: inout CachetByteBuffer,
        outputLimit: Int,
        now: UInt32,
        host: NodeIOQueue,
        tally: inout RequestTally
    )

    /// Exchanges the native requests made with `buffer` (the connection's input during a turn).
    func exchangeNative(with buffer: inout CachetByteBuffer)

    /// Whether a turn would find work now, with nothing new received: a whole request waits in `input`, or
    /// a reply sent in parts may ask for its next part because `outputBytes` are all that is left to send.
    func wantsTurn(input: borrowing CachetByteBuffer, outputBytes: Int) -> Bool

    /// Whether the connection closes once what came before is answered.
    var quitting: Bool { get }

    /// Turns the native replies appended to `output` since the last call into the connection's protocol.
    func translateReplies(in output: inout CachetByteBuffer)

    /// Called after a send took `count` bytes from the front of the output.
    func outputSent(_ count: Int)

    /// Bytes of the session's own buffers beyond their initial sizes (charged to the connections' budget
    /// with the connection's buffers).
    var bufferFootprint: Int { get }

    /// Gives back what the session's empty buffers grew to: past their retained size, or, when `tight` (the
    /// budget is exhausted), past their initial size.
    func trimBuffers(tight: Bool)
}

extension CachetByteBuffer {
    /// Shrinks an empty buffer grown past `retained` (past `initial` when `tight`) back to `initial` bytes.
    mutating func trimIfEmpty(initial: Int, retained: Int, tight: Bool) {
        shrinkIfEmpty(above: tight ? initial : retained, to: initial)
    }
}

/// The protocol the connections of a listener speak.
enum ConnectionLanguage: Sendable {
    /// The node's own binary protocol (`Protocol/PROTOCOL.md`).
    case native
    /// memcached's text protocol (`--memcached-port`, ``MemcacheSession``).
    case memcache(MemcacheSession.Settings)
    /// HTTP/1.1 (`--http-port`, ``HTTPSession``).
    case http(HTTPSession.Settings)
}

extension CachetByteBuffer {
    /// Appends a native request frame: its length prefix and header, then `bodyLength` bytes written by
    /// `body` (what a ``TranslatingSession`` makes of the requests it receives).
    @inline(__always)
    mutating func appendRequestFrame(
        _ opcode: CachetOpcode,
        flags: CachetRequestFlags,
        id: UInt32,
        bodyLength: Int,
        _ body: (inout CachetByteBuffer) -> Void
    ) {
        reserveWritable(CachetProtocol.frameOverhead + bodyLength)
        CachetFrameEncoder.writePrefixAndHeader(
            to: writePointer,
            bodyLength: bodyLength,
            header: CachetFrameHeader(opcode: opcode, word: flags.rawValue, id: id)
        )
        moveWriteIndex(forwardBy: CachetProtocol.frameOverhead)
        body(&self)
    }
}

/// Calls `reply` with the header and body of each whole native reply frame in `region`, in order (what a
/// ``TranslatingSession`` turns into its protocol before a send).
@inline(__always)
func forEachNativeReply(in region: UnsafeRawBufferPointer, _ reply: (CachetFrameHeader, UnsafeRawBufferPointer) -> Void)
{
    var offset = 0
    while offset < region.count,
        let frame = try? CachetReplyDecoder.decodeReply(in: region, at: offset, maximumPayloadLength: Int(UInt32.max))
    {
        offset = frame.end
        reply(frame.header, UnsafeRawBufferPointer(rebasing: region[frame.body]))
    }
}

extension CachetByteBuffer {
    /// Replaces what follows the first `kept` bytes (native replies, translated into `translation`) with
    /// `translation`'s bytes. When nothing is kept (the usual case: the text before was all sent), the two
    /// buffers change places instead, which saves a copy of every value; `translation` is left empty, to be
    /// written into next time.
    mutating func replaceTranslated(after kept: Int, with translation: inout CachetByteBuffer) {
        if kept == 0 {
            swap(&self, &translation)
            translation.clear()
        } else {
            keepReadable(kept)
            append(translation.readableRegion)
            // Copied: the translation is empty again, so that a session may give its room back.
            translation.clear()
        }
    }
}

/// What a ``TranslatingSession``'s native requests in flight mean, first in first out, in a ring that keeps
/// its storage.
struct PendingQueue<Element> {
    private var items: [Element?] = []
    private var head = 0
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    /// The oldest item, left in place.
    var first: Element? { count > 0 ? items[head] : nil }

    mutating func append(_ item: Element) {
        if count == items.count {
            // Grown in order, oldest first.
            var grown: [Element?] = []
            grown.reserveCapacity(max(16, items.count * 2))
            for index in 0..<count { grown.append(items[(head + index) % items.count]) }
            grown.append(contentsOf: repeatElement(nil, count: max(16, items.count * 2) - count))
            items = grown
            head = 0
        }
        items[(head + count) % items.count] = item
        count += 1
    }

    mutating func removeFirst() -> Element? {
        guard count > 0 else { return nil }
        let item = items[head]
        items[head] = nil
        head = (head + 1) % items.count
        count -= 1
        return item
    }
}
