import CachetAuth
import CachetWire
import Testing

/// The auth file, secret hashes, what each role and prefix allows, and the failure limiter, without
/// sockets.
@Suite("Auth: users, roles, prefixes")
struct CachetAuthTests {
    static func file(_ users: String) -> [UInt8] { Array("{\"users\": [\(users)]}".utf8) }

    static let shopHash = CachetSecretHash(hashing: Array("shop-secret".utf8))
    static let opsHash = CachetSecretHash(hashing: Array("ops-secret".utf8))
    static let readerHash = CachetSecretHash(hashing: Array("reader-secret".utf8))

    static func table() throws -> CachetAuthTable {
        try CachetAuthTable(
            json: file(
                """
                {"name": "shop", "secret": "\(shopHash)", "role": "write", "prefixes": ["shop:", "cart:"]},
                {"name": "ops", "secret": "\(opsHash)", "role": "admin"},
                {"name": "reader", "secret": "\(readerHash)", "role": "read"}
                """
            )
        )
    }

    @Test func aHashRoundTripsAndMatchesOnlyItsSecret() throws {
        let hash = CachetSecretHash(hashing: Array("s3cret".utf8))
        let parsed = try CachetSecretHash(parsing: hash.description)
        #expect(parsed == hash)
        #expect(parsed.matches(Array("s3cret".utf8)))
        #expect(!parsed.matches(Array("s3cret ".utf8)))
        #expect(!parsed.matches([]))
        // Salted: the same secret hashes differently twice.
        #expect(CachetSecretHash(hashing: Array("s3cret".utf8)) != hash)
        #expect(hash.description.hasPrefix("sha256$"))
    }

    @Test(arguments: [
        "plain", "sha256$zz$00", "md5$00112233445566778899$00", "sha256$0011$" + String(repeating: "0", count: 64),
    ])
    func aMalformedHashIsRefused(_ text: String) {
        #expect(throws: CachetAuthError.self) { try CachetSecretHash(parsing: text) }
    }

    @Test func usersAuthenticateWithTheirSecretOnly() throws {
        let table = try Self.table()
        #expect(table.userNames == ["ops", "reader", "shop"])
        #expect(table.authenticate(user: "shop", secret: Array("shop-secret".utf8))?.role == .write)
        #expect(table.authenticate(user: "shop", secret: Array("ops-secret".utf8)) == nil)
        #expect(table.authenticate(user: "nobody", secret: Array("shop-secret".utf8)) == nil)
    }

    @Test func aBadFileSaysWhichUserAndWhy() {
        let cases: [(String, String)] = [
            (#"{"name": "a", "secret": "\#(Self.shopHash)", "role": "root"}"#, "user a needs a \"role\""),
            (#"{"name": "a", "role": "read"}"#, "user a has no \"secret\""),
            (#"{"secret": "\#(Self.shopHash)", "role": "read"}"#, "users[0] needs a \"name\""),
            (#"{"name": "a", "secret": "x", "role": "read"}"#, "user a: a secret is stored as"),
            (
                #"{"name": "a", "secret": "\#(Self.shopHash)", "role": "read"}, {"name": "a", "secret": "\#(Self.shopHash)", "role": "read"}"#,
                "user a is listed twice"
            ),
            (#"{"name": "a", "secret": "\#(Self.shopHash)", "role": "read", "prefixes": [""]}"#, "empty prefix"),
        ]
        for (users, expected) in cases {
            do {
                _ = try CachetAuthTable(json: Self.file(users))
                Issue.record("accepted: \(users)")
            } catch {
                #expect(error.message.contains(expected), "\(error.message)")
            }
        }
        #expect(throws: CachetAuthError.self) { try CachetAuthTable(json: Array("[]".utf8)) }
    }

    static func refusal(
        _ principal: CachetPrincipal,
        _ opcode: CachetOpcode,
        key: String? = nil,
        flags: CachetRequestFlags = []
    ) -> String? {
        guard let key else { return principal.refusal(opcode: opcode, flags: flags.rawValue, key: nil) }
        return Array(key.utf8).withUnsafeBytes { principal.refusal(opcode: opcode, flags: flags.rawValue, key: $0) }
    }

    @Test func eachRoleMayDoItsOwnAndNoMore() throws {
        let table = try Self.table()
        let reader = try #require(table.authenticate(user: "reader", secret: Array("reader-secret".utf8)))
        let shop = try #require(table.authenticate(user: "shop", secret: Array("shop-secret".utf8)))
        let ops = try #require(table.authenticate(user: "ops", secret: Array("ops-secret".utf8)))

        #expect(Self.refusal(reader, .get, key: "any") == nil)
        #expect(Self.refusal(reader, .ping) == nil)
        #expect(Self.refusal(reader, .put, key: "any")?.contains("may only read") == true)
        #expect(Self.refusal(reader, .delete, key: "any") != nil)
        #expect(Self.refusal(reader, .clear)?.contains("admin") == true)
        #expect(Self.refusal(reader, .stats) == nil, "the counters, without the member list")
        #expect(Self.refusal(reader, .stats, flags: .cluster)?.contains("admin") == true)

        #expect(Self.refusal(shop, .put, key: "shop:1") == nil)
        #expect(Self.refusal(shop, .get, key: "cart:9") == nil)
        #expect(Self.refusal(shop, .delete, key: "shop:") == nil)
        #expect(Self.refusal(shop, .get, key: "user:1")?.contains("'shop:', 'cart:'") == true)
        #expect(Self.refusal(shop, .put, key: "sho") != nil, "shorter than the prefix")
        #expect(Self.refusal(shop, .clear) != nil)

        #expect(Self.refusal(ops, .clear) == nil)
        #expect(Self.refusal(ops, .stats, flags: .cluster) == nil)
        #expect(Self.refusal(ops, .put, key: "anything") == nil)
        #expect(Self.refusal(shop, .get, key: "shop:1", flags: .cluster)?.contains("admin") == true)

        // A node's own flags are no client's: forwarding never widens rights.
        #expect(Self.refusal(ops, .get, key: "k", flags: .forwarded)?.contains("forwarded") == true)
        // An admin limited to prefixes clears only under them: all of them, or narrower ones it names.
        let limitedAdmin = CachetPrincipal(name: "x", role: .admin, prefixes: [Array("x:".utf8), Array("y".utf8)])
        #expect(Self.refusal(limitedAdmin, .clear) == nil)
        #expect(try limitedAdmin.clearScope(requested: []).get() == [Array("x:".utf8), Array("y".utf8)])
        #expect(try limitedAdmin.clearScope(requested: [Array("x:1".utf8)]).get() == [Array("x:1".utf8)])
        guard case .failure(let wider) = limitedAdmin.clearScope(requested: [Array("x:1".utf8), Array("x".utf8)]) else {
            Issue.record("a prefix wider than the user's was allowed")
            return
        }
        #expect(wider.message.contains("'x' is wider"))
        #expect(try ops.clearScope(requested: []).get() == [])
        #expect(try ops.clearScope(requested: [Array("a".utf8)]).get() == [Array("a".utf8)])
        #expect(Self.refusal(ops, CachetOpcode(rawValue: 0x33)) != nil)
        // A cluster member's user: everything, the node-to-node flags included.
        let member = CachetPrincipal(name: "member", role: .peer)
        #expect(Self.refusal(member, .get, key: "any", flags: .forwarded) == nil)
        #expect(Self.refusal(member, .clear, flags: [.forwarded, .invalidation]) == nil)
    }

    @Test func anAddressPastItsFailuresWaitsForItsWindow() {
        var limiter = CachetAuthFailureLimiter(maximumFailures: 3, window: 60, maximumAddresses: 2)
        for second in 0..<3 {
            #expect(limiter.allows("10.0.0.1", now: UInt64(100 + second)))
            limiter.recordFailure("10.0.0.1", now: UInt64(100 + second))
        }
        #expect(!limiter.allows("10.0.0.1", now: 130), "three failures within the window")
        #expect(limiter.allows("10.0.0.2", now: 130), "another address is not held back")
        #expect(limiter.allows("10.0.0.1", now: 160), "the window since the first failure has passed")
        // Bounded: a third address pushes out the one whose window started first.
        limiter.recordFailure("10.0.0.2", now: 131)
        limiter.recordFailure("10.0.0.3", now: 132)
        #expect(limiter.addressCount == 2)
        #expect(limiter.allows("10.0.0.1", now: 133), "forgotten")
    }
}
