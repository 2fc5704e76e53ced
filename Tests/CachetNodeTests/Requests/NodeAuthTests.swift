import CachetAuth
import CachetCluster
import CachetIO
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Users on a real node (`--auth-file`): AUTH first, each role and prefix allowed and refused, the
/// forwarded flag refused, repeated failures closing the connection and then refused per address, the
/// file re-read on SIGHUP, and `cachet-cli --user`.
@Suite("Node: users and roles", .serialized, .dedicatedThreads)
struct NodeAuthTests {
    static func writeAuthFile(
        _ path: String,
        _ users: [(name: String, secret: String, role: String, prefixes: [String])]
    ) throws {
        let entries = users.map { user in
            let prefixes =
                user.prefixes.isEmpty
                ? "" : ", \"prefixes\": [" + user.prefixes.map { "\"\($0)\"" }.joined(separator: ", ") + "]"
            return
                "{\"name\": \"\(user.name)\", \"secret\": \"\(CachetSecretHash(hashing: Array(user.secret.utf8)))\", \"role\": \"\(user.role)\"\(prefixes)}"
        }
        try Data(("{\"users\": [" + entries.joined(separator: ", ") + "]}\n").utf8).write(
            to: URL(fileURLWithPath: path)
        )
    }

    static let users: [(name: String, secret: String, role: String, prefixes: [String])] = [
        ("shop", "shop-secret-0123456789", "write", ["shop:"]),
        ("reader", "reader-secret-0123456789", "read", []),
        ("ops", "ops-secret-0123456789", "admin", []),
    ]

    static func node(_ directory: TemporaryDirectory) throws -> NodeProcess {
        let file = directory.appending("users.json")
        try writeAuthFile(file, users)
        return try NodeProcess(arguments: ["--auth-file", file, "--disk-limit", "0", "--log-level", "info"])
    }

    static func auth(_ socket: TestSocket, _ user: String, _ secret: String) throws -> CachetResponse {
        try socket.roundTrip(.auth(user: Array(user.utf8), secret: Array(secret.utf8)))
    }

    @Test func nothingButAuthBeforeAuthenticating() throws {
        let directory = TemporaryDirectory(prefix: "cachet-auth")
        defer { directory.remove() }
        let node = try Self.node(directory)
        let socket = try node.connect()
        for command in [CachetCommand.ping, .get(key: Array("k".utf8)), .stats, .clear] {
            let reply = try socket.roundTrip(command)
            #expect(reply.status == .notAuthenticated, "\(command)")
        }
        #expect(try Self.auth(socket, "shop", "wrong").status == .notAuthenticated)
        #expect(try Self.auth(socket, "nobody", "shop-secret-0123456789").status == .notAuthenticated)
        #expect(try Self.auth(socket, "shop", "shop-secret-0123456789").status == .ok)
        #expect(try socket.roundTrip(.ping).status == .ok)
    }

    @Test func eachRoleAndPrefixIsEnforced() throws {
        let directory = TemporaryDirectory(prefix: "cachet-auth")
        defer { directory.remove() }
        let node = try Self.node(directory)
        let shop = try node.connect()
        #expect(try Self.auth(shop, "shop", "shop-secret-0123456789").status == .ok)
        #expect(try shop.roundTrip(.put(key: Array("shop:1".utf8), value: [1], ttl: 0)).status == .ok)
        #expect(try shop.roundTrip(.get(key: Array("shop:1".utf8))).body == [1])
        let outside = try shop.roundTrip(.put(key: Array("user:1".utf8), value: [2], ttl: 0))
        #expect(outside.status == .forbidden)
        #expect(String(decoding: outside.body, as: UTF8.self).contains("'shop:'"))
        #expect(try shop.roundTrip(.clear).status == .forbidden)
        // STATS: the counters, but the member list only for an admin.
        let stats = try shop.roundTrip(.stats)
        #expect(stats.status == .ok)
        let body = String(decoding: stats.body, as: UTF8.self)
        #expect(body.contains("\"items\"") && !body.contains("cluster_members"), "\(body)")
        // A node's own flag is no client's.
        let forwarded = try NodeForwardingTests.get("shop:1", from: shop, flags: .forwarded)
        #expect(forwarded.status == .forbidden)
        // A large PUT (received in place on an open node) is checked too.
        let large = [UInt8](repeating: 7, count: 300_000)
        #expect(try shop.roundTrip(.put(key: Array("user:big".utf8), value: large, ttl: 0)).status == .forbidden)
        #expect(try shop.roundTrip(.put(key: Array("shop:big".utf8), value: large, ttl: 0)).status == .ok)

        let reader = try node.connect()
        #expect(try Self.auth(reader, "reader", "reader-secret-0123456789").status == .ok)
        #expect(try reader.roundTrip(.get(key: Array("shop:1".utf8))).body == [1])
        #expect(try reader.roundTrip(.delete(key: Array("shop:1".utf8))).status == .forbidden)

        let ops = try node.connect()
        #expect(try Self.auth(ops, "ops", "ops-secret-0123456789").status == .ok)
        #expect(String(decoding: try ops.roundTrip(.stats).body, as: UTF8.self).contains("cluster_members"))
        #expect(try ops.roundTrip(.clear).status == .ok)
        #expect(try ops.roundTrip(.get(key: Array("shop:1".utf8))).status == .notFound)
    }

    @Test func aClearByAUserLimitedToPrefixesRemovesOnlyTheirKeysFromBothTiers() throws {
        let directory = TemporaryDirectory(prefix: "cachet-auth-clear")
        defer { directory.remove() }
        let file = directory.appending("users.json")
        try Self.writeAuthFile(
            file,
            Self.users + [("shopadmin", "shopadmin-secret-0123456789", "admin", ["shop:", "cart:"])]
        )
        let data = directory.appending("data")
        let arguments = ["--auth-file", file, "--data-dir", data]
        var node = try NodeProcess(arguments: arguments)
        let ops = try node.connect()
        #expect(try Self.auth(ops, "ops", "ops-secret-0123456789").status == .ok)
        let keys = ["shop:1", "shop:2", "cart:1", "user:1", "shopping", "user:shop:1"]
        for key in keys {
            #expect(try ops.roundTrip(.put(key: Array(key.utf8), value: Array("v-\(key)".utf8), ttl: 0)).status == .ok)
        }
        let admin = try node.connect()
        #expect(try Self.auth(admin, "shopadmin", "shopadmin-secret-0123456789").status == .ok)
        // A prefix wider than the user's own is refused; a narrower one clears only what it names.
        let wider = try admin.roundTrip(.clearPrefixes([Array("sh".utf8)]))
        #expect(wider.status == .forbidden)
        #expect(String(decoding: wider.body, as: UTF8.self).contains("'sh' is wider"))
        let narrow = try admin.roundTrip(.clearPrefixes([Array("shop:2".utf8)]))
        #expect(narrow.status == .ok)
        #expect(try CachetClearResult(decoding: narrow.body).items == 1)
        #expect(try ops.roundTrip(.get(key: Array("shop:2".utf8))).status == .notFound)
        #expect(try ops.roundTrip(.get(key: Array("shop:1".utf8))).status == .ok)
        // A CLEAR without prefixes clears the user's: shop:1 and cart:1, on disk too.
        let reply = try admin.roundTrip(.clear)
        #expect(reply.status == .ok)
        let removed = try CachetClearResult(decoding: reply.body)
        #expect(removed.items == 2, "\(removed)")
        #expect(removed.bytes == UInt64(("shop:1" + "v-shop:1" + "cart:1" + "v-cart:1").utf8.count))
        let left = ["user:1", "shopping", "user:shop:1"]
        for key in keys {
            let status = try ops.roundTrip(.get(key: Array(key.utf8))).status
            #expect(status == (left.contains(key) ? .ok : .notFound), "\(key)")
        }
        // What survives a restart is what the disk tier kept: the same keys.
        #expect(node.stop() == 0)
        node = try NodeProcess(arguments: arguments)
        let again = try node.connect()
        #expect(try Self.auth(again, "ops", "ops-secret-0123456789").status == .ok)
        for key in keys {
            let status = try again.roundTrip(.get(key: Array(key.utf8))).status
            #expect(status == (left.contains(key) ? .ok : .notFound), "after a restart: \(key)")
        }
        // An admin without prefixes may clear any prefix.
        let any = try again.roundTrip(.clearPrefixes([Array("user:".utf8)]))
        #expect(try CachetClearResult(decoding: any.body).items == 2)
        #expect(try again.roundTrip(.get(key: Array("shopping".utf8))).status == .ok)
    }

    @Test func repeatedFailuresCloseTheConnectionThenHoldTheAddressBack() throws {
        let directory = TemporaryDirectory(prefix: "cachet-auth")
        defer { directory.remove() }
        let node = try Self.node(directory)
        // Three failures on one connection close it.
        let first = try node.connect()
        for _ in 0..<3 { #expect(try Self.auth(first, "ops", "guess").status == .notAuthenticated) }
        #expect(first.waitForClose())
        // Ten failures from the address within a minute: the right secret is refused too.
        for _ in 0..<3 {
            let socket = try node.connect()
            for _ in 0..<3 { _ = try? Self.auth(socket, "ops", "guess") }
        }
        let late = try node.connect()
        let refused = try Self.auth(late, "ops", "ops-secret-0123456789")
        #expect(refused.status == .notAuthenticated)
        #expect(String(decoding: refused.body, as: UTF8.self).contains("too many failed attempts"))
        // Nothing secret in the log.
        #expect(!node.log.contains("guess") && !node.log.contains("ops-secret"))
    }

    @Test func sighupReadsTheUsersAgain() throws {
        let directory = TemporaryDirectory(prefix: "cachet-auth")
        defer { directory.remove() }
        let node = try Self.node(directory)
        let file = directory.appending("users.json")
        try Self.writeAuthFile(file, Self.users + [("new", "new-secret-0123456789", "read", [])])
        kill(node.process.processIdentifier, SIGHUP)
        let deadline = Date().addingTimeInterval(5)
        while !node.log.contains("auth file read again") && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        #expect(try Self.auth(try node.connect(), "new", "new-secret-0123456789").status == .ok)
        // A bad file leaves the users in force.
        try Data("{\"users\": [{\"name\": \"x\"}]}".utf8).write(to: URL(fileURLWithPath: file))
        kill(node.process.processIdentifier, SIGHUP)
        let bad = Date().addingTimeInterval(5)
        while !node.log.contains("auth file not reloaded") && Date() < bad { Thread.sleep(forTimeInterval: 0.05) }
        #expect(node.log.contains("auth file not reloaded"))
        #expect(try Self.auth(try node.connect(), "new", "new-secret-0123456789").status == .ok)
    }

    @Test func aNodeWithoutUsersAnswersAuthWithABadRequest() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let reply = try Self.auth(try node.connect(), "anyone", "secret")
        #expect(reply.status == .badRequest)
        #expect(String(decoding: reply.body, as: UTF8.self).contains("no users"))
    }

    @Test func aBadAuthFileStopsTheNodeAtStart() throws {
        let directory = TemporaryDirectory(prefix: "cachet-auth")
        defer { directory.remove() }
        let file = directory.appending("users.json")
        try Data("{\"users\": [{\"name\": \"x\", \"secret\": \"sha256$00$00\", \"role\": \"read\"}]}".utf8)
            .write(to: URL(fileURLWithPath: file))
        #expect(throws: (any Error).self) { _ = try NodeProcess(arguments: ["--auth-file", file], timeout: 5) }
    }

    @Test func cachetCliAuthenticatesWithItsUser() throws {
        let directory = TemporaryDirectory(prefix: "cachet-auth")
        defer { directory.remove() }
        let node = try Self.node(directory)
        let secretFile = directory.appending("secret")
        try Data("shop-secret-0123456789\n".utf8).write(to: URL(fileURLWithPath: secretFile))
        func cli(_ arguments: [String], environment: [String: String] = [:]) throws -> (String, Int32) {
            try runProcess(
                BuiltProducts.path(of: "cachet-cli"),
                ["--port", "\(node.port)"] + arguments,
                environment: environment
            )
        }
        let (put, putStatus) = try cli(["--user", "shop", "--secret-file", secretFile, "put", "shop:a", "v"])
        #expect(putStatus == 0 && put == "OK\n", "\(put)")
        let (get, _) = try cli(
            ["--user", "shop", "get", "shop:a"],
            environment: ["CACHET_SECRET": "shop-secret-0123456789"]
        )
        #expect(get == "v\n", "\(get)")
        let (refused, refusedStatus) = try cli(
            ["--user", "shop", "get", "shop:a"],
            environment: ["CACHET_SECRET": "wrong"]
        )
        #expect(refusedStatus == 2 && refused.contains("AUTH as shop refused"), "\(refused)")
        let (anonymous, _) = try cli(["get", "shop:a"])
        #expect(anonymous.contains("NOT_AUTHENTICATED"), "\(anonymous)")
    }

    @Test func cachetCliHashSecretMakesWhatTheFileStores() throws {
        let (text, status) = try runProcess(
            BuiltProducts.path(of: "cachet-cli"),
            ["hash-secret"],
            input: "a-long-random-secret\n"
        )
        #expect(status == 0)
        let hash = try CachetSecretHash(parsing: String(text.dropLast()))
        #expect(hash.matches(Array("a-long-random-secret".utf8)))
        #expect(!hash.matches(Array("a-long-random-secret\n".utf8)))
    }

    /// A cluster whose members have users: each member authenticates to its peers as the `peer` user, so
    /// a client's write of another member's key is forwarded (and its rights were checked where it came
    /// in); a client still may not send the forwarded flag; a member with a wrong peer secret is refused
    /// by its peers.
    @Test func aClusterWithUsersForwardsBetweenAuthenticatedMembers() throws {
        let directory = TemporaryDirectory(prefix: "cachet-auth-cluster")
        defer { directory.remove() }
        let users = directory.appending("users.json")
        try Self.writeAuthFile(
            users,
            Self.users + [
                ("member", "member-secret-0123456789", "peer", []),
                ("shopadmin", "shopadmin-secret-0123456789", "admin", ["shop:"]),
            ]
        )
        let secret = directory.appending("member.secret")
        try Data("member-secret-0123456789\n".utf8).write(to: URL(fileURLWithPath: secret))
        let ports = try (0..<3).map { _ in
            let (fd, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
            CachetSocket.close(fd)
            return port
        }
        let file = directory.appending("cluster.json")
        let entries = ports.enumerated().map { "{\"id\": \"n\($0 + 1)\", \"host\": \"127.0.0.1\", \"port\": \($1)}" }
        try Data(("{\"members\": [" + entries.joined(separator: ", ") + "]}\n").utf8)
            .write(to: URL(fileURLWithPath: file))
        let membership = try CachetMembership(contentsOfFile: file)
        let nodes = try (1...3).map { index in
            try NodeProcess(arguments: [
                "--cluster", file, "--node-id", "n\(index)", "--port", "\(ports[index - 1])", "--auth-file", users,
                "--peer-user", "member", "--peer-secret-file", secret, "--probe-interval", "0.1", "--disk-limit", "0",
            ])
        }
        let key = (0...).lazy.map { "shop:\($0)" }.first { membership.owner(of: $0).id == "n2" }!
        func connect(_ index: Int, as user: String, _ secret: String) throws -> TestSocket {
            let socket = try TestSocket(port: ports[index], timeout: 5)
            #expect(try Self.auth(socket, user, secret).status == .ok)
            return socket
        }
        let n1 = try connect(0, as: "shop", "shop-secret-0123456789")
        var written = false
        let deadline = Date().addingTimeInterval(15)
        while !written && Date() < deadline {
            written = try n1.roundTrip(.put(key: Array(key.utf8), value: Array("v".utf8), ttl: 0)).status == .ok
            if !written { Thread.sleep(forTimeInterval: 0.1) }
        }
        #expect(written, "the write through n1 reached n2")
        let n3 = try connect(2, as: "reader", "reader-secret-0123456789")
        #expect(try n3.roundTrip(.get(key: Array(key.utf8))).body == Array("v".utf8))
        // n2 holds it itself: the forward was served by n2 (a member asks with the forwarded flag).
        let member = try connect(1, as: "member", "member-secret-0123456789")
        #expect(try NodeForwardingTests.get(key, from: member, flags: .forwarded).body == Array("v".utf8))
        #expect(try NodeForwardingTests.get(key, from: n3, flags: .forwarded).status == .forbidden)
        _ = nodes

        // A cluster-wide CLEAR by an admin limited to prefixes carries them to every member.
        let ops = try connect(0, as: "ops", "ops-secret-0123456789")
        let other = (0...).lazy.map { "user:\($0)" }.first { membership.owner(of: $0).id == "n2" }!
        #expect(try ops.roundTrip(.put(key: Array(other.utf8), value: Array("w".utf8), ttl: 0)).status == .ok)
        let shopAdmin = try connect(2, as: "shopadmin", "shopadmin-secret-0123456789")
        try shopAdmin.send(CachetCommand.clear.encoded(id: 5, flags: .cluster))
        let cleared = try shopAdmin.readResponse()
        #expect(cleared.status == .ok)
        let reply = try CachetClusterClearReply(decoding: cleared.body)
        #expect(reply.members.count == 3 && reply.members.allSatisfy { $0.status == .ok }, "\(reply.members)")
        #expect(reply.total.items == 1, "\(reply.members)")
        #expect(try ops.roundTrip(.get(key: Array(key.utf8))).status == .notFound)
        #expect(try ops.roundTrip(.get(key: Array(other.utf8))).body == Array("w".utf8))

        // A fourth process with the wrong peer secret: its peers refuse it, and say so in its log.
        let wrong = directory.appending("wrong.secret")
        try Data("not-the-secret\n".utf8).write(to: URL(fileURLWithPath: wrong))
        nodes[0].stop(signal: SIGKILL)
        let impostor = try NodeProcess(arguments: [
            "--cluster", file, "--node-id", "n1", "--port", "\(ports[0])", "--auth-file", users,
            "--peer-user", "member", "--peer-secret-file", wrong, "--probe-interval", "0.1", "--disk-limit", "0",
        ])
        let refused = Date().addingTimeInterval(5)
        while !impostor.log.contains("refused this member's peer credential") && Date() < refused {
            Thread.sleep(forTimeInterval: 0.05)
        }
        #expect(impostor.log.contains("refused this member's peer credential"), "\(impostor.log.suffix(1500))")
    }
}
