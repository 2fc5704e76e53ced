/// What processing the buffered input ended with.
enum ProcessingResult {
    /// Every whole frame was answered; the input holds at most a partial frame of `frameLength` bytes
    /// (0 when not even its length prefix has arrived).
    case needMoreBytes(frameLength: Int)
    /// The output passed its high-water mark; the rest of the input waits until it drains.
    case outputFull
    /// The next reply does not fit the memory the connection may still take (``ConnectionMemory``); its
    /// request stays at the head of the input until memory is returned.
    case memoryFull
    /// A framing error was answered; the connection closes once the reply is sent.
    case closeAfterReply
    /// A request needs the disk queue, a fan-out or a forward; the connection waits for the disk or the
    /// fan-out before answering anything else, and goes on past a forward (`ConnectionForwarding.processHeld`).
    case suspended(PendingOperation)
    /// The head frame is a PUT of a large value whose remaining bytes are to be read straight into its
    /// entry; the buffered part has been copied there and the input is empty.
    case receivingValue(DirectPut)
    /// The request limit was reached with whole frames left in the input: the connection gives others a
    /// turn and is processed again after them.
    case yielded
}
