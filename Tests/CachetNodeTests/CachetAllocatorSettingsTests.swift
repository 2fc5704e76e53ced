import CachetNode
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Whether AddressSanitizer's allocator replaces glibc's: it has no arenas, and `mallopt` fails.
private let underAddressSanitizer = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "__asan_init") != nil

@Suite("Allocator settings")
struct CachetAllocatorSettingsTests {
    @Test(.disabled(if: underAddressSanitizer, "AddressSanitizer replaces glibc's malloc and its mallopt"))
    func glibcAcceptsASingleArena() {
        // Harmless for the test process: it only stops further arenas from being made.
        #expect(CachetAllocatorSettings.applyToProcess())
    }
}
