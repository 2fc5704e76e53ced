import CachetNode
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Allocator settings")
struct CachetAllocatorSettingsTests {
    @Test(.disabled(if: underAddressSanitizer, "AddressSanitizer replaces glibc's malloc and its mallopt"))
    func glibcAcceptsASingleArena() {
        // Harmless for the test process: it only stops further arenas from being made.
        #expect(CachetAllocatorSettings.applyToProcess())
    }
}
