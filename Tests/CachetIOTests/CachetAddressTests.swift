import CachetIO
import Testing

@Suite struct CachetAddressTests {
    @Test(arguments: [
        ("127.0.0.1:7420", "127.0.0.1", 7420),
        ("localhost:80", "localhost", 80),
        ("[::1]:7420", "::1", 7420),
        ("[fe80::1:2]:1", "fe80::1:2", 1),
        ("  node-1.example.com:65535 ", "node-1.example.com", 65535),
        ("10.0.0.1:0", "10.0.0.1", 0),
    ])
    func parsesHostAndPort(text: String, host: String, port: Int) throws {
        let address = try CachetAddress(parsing: text)
        #expect(address.host == host)
        #expect(address.port == port)
    }

    @Test func bareHostsTakeTheDefaultPort() throws {
        #expect(
            try CachetAddress(parsing: "127.0.0.1", defaultPort: 7420) == CachetAddress(host: "127.0.0.1", port: 7420)
        )
        #expect(try CachetAddress(parsing: "::1", defaultPort: 7420) == CachetAddress(host: "::1", port: 7420))
        #expect(try CachetAddress(parsing: "[::1]", defaultPort: 9) == CachetAddress(host: "::1", port: 9))
    }

    @Test func descriptionBracketsIPv6() {
        #expect(CachetAddress(host: "::1", port: 7420).description == "[::1]:7420")
        #expect(CachetAddress(host: "127.0.0.1", port: 7420).description == "127.0.0.1:7420")
    }

    @Test(arguments: [
        "127.0.0.1", "[::1", "[::1]7420", "[nothost]:1", "::1:7420", "host:port", "a b:1", "999.1.1.1:1",
        ":80", "1.2.3.4:99999", "1.2.3.4:-1", "-bad-.com:1", "", "under.score_ok.but space:1",
    ])
    func rejectsBadInput(text: String) {
        #expect(throws: CachetIOError.self) { try CachetAddress(parsing: text) }
        do {
            _ = try CachetAddress(parsing: text)
        } catch {
            #expect(error.code == .invalidAddress)
            #expect(!error.message.isEmpty)
        }
    }

    @Test func validateRejectsPortsOutOfRange() {
        for port in [-1, 0, 65536, 99999] {
            #expect(throws: CachetIOError.self) { try CachetAddress(host: "127.0.0.1", port: port).validate() }
        }
        #expect(throws: Never.self) { try CachetAddress(host: "127.0.0.1", port: 0).validate(allowingPortZero: true) }
        do {
            try CachetAddress(host: "127.0.0.1", port: 99999).validate()
        } catch {
            #expect(error.message.contains("99999"))
        }
    }

    @Test func resolvesLiteralsAndLocalhost() throws {
        let v4 = try CachetAddress(host: "127.0.0.1", port: 7420).resolve()
        #expect(v4.map(\.description) == ["127.0.0.1:7420"])
        let v6 = try CachetAddress(host: "::1", port: 7420).resolve()
        #expect(v6.map(\.description) == ["[::1]:7420"])
        let local = try CachetAddress(host: "localhost", port: 80).resolve()
        #expect(!local.isEmpty)
        #expect(local.allSatisfy { $0.port == 80 })
        if local.contains(where: { $0.ipAddress == "127.0.0.1" }) { #expect(local[0].ipAddress == "127.0.0.1") }
    }

    @Test func unresolvableNamesFailClearly() {
        do {
            _ = try CachetAddress(host: "no-such-host.invalid", port: 1).resolve()
            Issue.record("resolved a .invalid name")
        } catch {
            #expect(error.code == .resolutionFailed)
            #expect(error.message.contains("no-such-host.invalid"))
        }
    }
}
