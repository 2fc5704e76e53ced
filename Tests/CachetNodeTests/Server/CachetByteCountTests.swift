import CachetNode
import Testing

@Suite("Byte counts and configuration")
struct CachetByteCountTests {
    @Test(arguments: [
        ("1048576", 1_048_576), ("512KiB", 512 << 10), ("256MiB", 256 << 20), ("2GiB", 2 << 30),
        ("1TiB", 1 << 40), ("64m", 64 << 20), ("10 KB", 10 << 10), ("0", 0),
    ])
    func parses(_ text: String, _ bytes: Int) throws {
        #expect(try CachetByteCount.parse(text) == bytes)
    }

    @Test(arguments: ["", "MiB", "12 bananas", "-5", "1.5GiB", "99999999999999999999"])
    func rejects(_ text: String) {
        #expect(throws: CachetNodeError.self) { try CachetByteCount.parse(text) }
    }

    @Test func validationNamesTheFlag() {
        var configuration = CachetNodeConfiguration()
        configuration.memoryLimit = 1000
        #expect(throws: CachetNodeError.self) { try configuration.validate() }
        do {
            try configuration.validate()
        } catch {
            #expect(error.message.contains("--memory-limit"))
            #expect(error.code == .invalidConfiguration)
        }
    }
}
