// swift-format-ignore-file
// (The snippets are the documents' words, spacing included.)
import CachetIO
import CachetWire

// The Swift snippets of docs/transport.md, as README.swift holds README.md's.

/// docs/transport.md, "An outbound connection": a channel that pings a node.
func transportPinger() throws {
    final class Pinger: CachetChannel, @unchecked Sendable {   // state touched only on the loop's queue
        override func channelActive() { write(CachetCommand.ping.encoded(id: 1)); flush() }
        override func channelRead() {
            let region = input.readableRegion
            var offset = 0
            do {
                while let frame = try CachetReplyDecoder.decodeReply(in: region, at: offset) {
                    // frame.header.id, frame.header.status, region[frame.body] ...
                    offset = frame.end
                }
            } catch {
                return close(error: CachetIOError(code: .connectionClosed, message: error.message))
            }
            input.moveReadIndex(forwardBy: offset)   // a partial reply stays for the next read
        }
        override func channelInactive(error: CachetIOError?) { /* refused, timed out, closed, loop stopped */ }
    }
    let loop = try CachetEventLoop(label: "cachet.client.0")
    loop.start()
    loop.execute { loop.connect(Pinger(), to: CachetAddress(host: "127.0.0.1", port: 7420), timeout: .seconds(1)) }
    // ...
    loop.stop()   // closes every channel (loopStopped) and releases the loop
}

/// Stands for the client's request in the shared-channel snippet.
struct SnippetRequest {
    func encode(id: UInt32, to buffer: inout CachetByteBuffer) { buffer.append(CachetCommand.ping.encoded(id: id)) }
}

/// docs/transport.md, "Writing from any thread".
func transportWriteShared(channel: CachetSharedChannel, request: SnippetRequest, id: UInt32) {
    // Any thread, while holding the lock that orders the requests (the client's slot lock):
    let mustSend = channel.writeShared { buffer in request.encode(id: id, to: &buffer) }
    // After releasing that lock:
    if mustSend { channel.sendShared() }
}
