import CachetNode
import Testing

@Suite("Allocator settings")
struct CachetAllocatorSettingsTests {
    @Test func glibcAcceptsASingleArena() {
        // Harmless for the test process: it only stops further arenas from being made.
        #expect(CachetAllocatorSettings.applyToProcess())
    }
}
