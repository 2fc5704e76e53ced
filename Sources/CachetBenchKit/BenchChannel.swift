import CachetIO

/// One connection of a load thread (``LoadWorker``), hosted by the worker's `CachetEventLoop`: requests are
/// written into its output and sent by the loop, which reads replies into its input and calls the worker
/// to count them. It keeps the send times of its requests in flight, oldest first, in memory of its own,
/// so that counting a reply allocates nothing.
///
/// Generic over the protocol driver only so that it can name its worker's type: the worker's methods,
/// generic over the same driver, are called without an existential or a closure.
///
/// `@unchecked Sendable`: made on the calling thread, handed to the loop once by
/// ``CachetEventLoop/register(_:fd:isNonBlocking:)``, and touched on the loop's queue only afterwards.
final class BenchChannel<Driver: BenchProtocolDriver>: CachetChannel, @unchecked Sendable {
    /// The worker whose loop hosts the channel. Unowned and unchecked, so that an event touches no
    /// reference count: the worker holds its channels and stops its loop (closing them) before it goes.
    unowned(unsafe) let worker: LoadWorker<Driver>
    /// Index of the server in ``BenchConfiguration/targets``.
    let target: Int
    /// In-flight requests, oldest first: send time in nanoseconds shifted left once, low bit set for a read.
    private let ring: UnsafeMutablePointer<UInt64>
    private let ringCapacity: Int
    private var ringHead = 0
    /// Requests written and not yet answered.
    private(set) var inFlight = 0

    /// - Parameters:
    ///   - worker: the load thread.
    ///   - target: the server's index.
    ///   - pipeline: the most requests in flight.
    ///   - requestBound: the most bytes one request takes.
    init(worker: LoadWorker<Driver>, target: Int, pipeline: Int, requestBound: Int) {
        self.worker = worker
        self.target = target
        ring = .allocate(capacity: pipeline)
        ringCapacity = pipeline
        super.init(inputCapacity: 64 << 10, outputCapacity: min(pipeline * requestBound, 4 << 20))
    }

    deinit {
        ring.deallocate()
    }

    /// Notes a request written at `time` (a read or a write).
    @inline(__always)
    func push(sentAt time: UInt64, read: Bool) {
        var slot = ringHead + inFlight
        if slot >= ringCapacity { slot -= ringCapacity }
        ring[slot] = time << 1 | (read ? 1 : 0)
        inFlight += 1
    }

    /// Takes the oldest request in flight: its send time and whether it was a read.
    @inline(__always)
    func pop() -> (time: UInt64, read: Bool) {
        let entry = ring[ringHead]
        ringHead += 1
        if ringHead == ringCapacity { ringHead = 0 }
        inFlight -= 1
        return (entry >> 1, entry & 1 == 1)
    }

    /// Notes when the loop found the socket ready, before it reads: a reply's latency ends when it has
    /// arrived, not when the read that takes it returns.
    override func handleEvents(_ events: Events, on loop: CachetEventLoop) {
        worker.readyAt = monotonicNanoseconds()
        super.handleEvents(events, on: loop)
    }

    override func channelRead() {
        worker.received(on: self)
    }

    override func channelInactive(error: CachetIOError?) {
        worker.closed(self, error: error)
    }
}
