/// A listening socket hosted by a ``CachetEventLoop``, so that accepting is one more channel of the loop
/// rather than a thread or a Dispatch source of its own: when the socket is readable it accepts every
/// connection waiting (non-blocking, close-on-exec, `TCP_NODELAY`) and hands each descriptor to `accepted`,
/// on the loop's queue. Out of descriptors or memory (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`), the
/// listening socket stays readable, so it stops watching it for ``pauseAfterExhaustion`` instead of
/// spinning on it, then accepts again.
///
/// Register it with ``CachetEventLoop/register(_:fd:isNonBlocking:)`` and the descriptor
/// ``CachetSocket/listen(on:backlog:)`` returned; ``CachetChannel/close(error:)`` stops accepting and closes
/// the socket. `@unchecked Sendable` as every channel: touched only on its loop's queue after registration.
public final class CachetListener: CachetChannel, @unchecked Sendable {
    /// How long accepting stops after the system ran out of descriptors or memory.
    public static let pauseAfterExhaustion = Duration.milliseconds(100)

    private let accepted: (Int32) -> Void
    private let failed: (CachetIOError) -> Void
    private var paused = false

    /// - Parameters:
    ///   - accepted: takes each accepted connection's descriptor (it owns it from then on).
    ///   - failed: told of each failed accept (a pause follows one of `resourceExhausted`).
    public init(accepted: @escaping (Int32) -> Void, failed: @escaping (CachetIOError) -> Void) {
        self.accepted = accepted
        self.failed = failed
        super.init(inputCapacity: 0, outputCapacity: 0)
    }

    /// Readable while accepting; nothing (errors only) while paused.
    public override var activeEvents: Events { paused ? [] : [.readable] }

    public override func handleEvents(_ events: Events, on loop: CachetEventLoop) {
        acceptWaiting()
    }

    /// Accepts until none is waiting (the registration is edge-triggered), the listener is closed by a
    /// handler, or accepting fails.
    private func acceptWaiting() {
        while isActive && !paused {
            do throws(CachetIOError) {
                guard let fd = try CachetSocket.accept(self.fd) else { return }
                accepted(fd)
            } catch {
                failed(error)
                if error.code == .resourceExhausted { pause() }
                return
            }
        }
    }

    private func pause() {
        paused = true
        updateInterest()
        _ = eventLoop?.schedule(after: Self.pauseAfterExhaustion) { [weak self] in
            guard let self, isActive else { return }
            paused = false
            updateInterest(rearm: true)
            acceptWaiting()
        }
    }
}
