public import ServiceLifecycle

extension CachetClient: Service {
    /// Runs until graceful shutdown is triggered (or the task is cancelled), then shuts the client down:
    /// requests in flight are answered, new ones fail with `shutdown`.
    ///
    /// Add the client to a `ServiceGroup` beside the services that use it, so that it shuts down after
    /// them if they are listed before it.
    public func run() async throws {
        try? await gracefulShutdown()
        await shutdown()
    }
}
