import CachetIO
import CachetTestSupport
import CachetWire
import Foundation
import Testing

/// Values read over the node's HTTP port (`--http-values`, `docs/node.md`, "Values over HTTP"), by real HTTP
/// clients against real node processes: whole values and byte ranges (206, `Content-Range`, 416 past the
/// end, 404 on a miss, HEAD), users with HTTP Basic, a key another member owns, and a video played, sought
/// and played again by headless Chromium from a page the cache serves too.
@Suite("Node: values over HTTP", .dedicatedThreads)
struct NodeHTTPValuesTests {
    struct Reply {
        var status: Int
        var headers: [String: String]
        var body: [UInt8]
    }

    /// One HTTP request with Python's urllib (no redirects, no retries): the status, the headers (lower-case
    /// names) and the body.
    static func request(
        _ port: Int,
        _ path: String,
        method: String = "GET",
        headers: [String: String] = [:],
        ca: String? = nil
    ) throws -> Reply {
        // With `ca`, over HTTPS, checking the node's certificate against it.
        let script = """
            import json, ssl, sys, urllib.request, urllib.error
            scheme = "https" if sys.argv[4] else "http"
            request = urllib.request.Request(scheme + "://127.0.0.1:\(port)" + sys.argv[1], method=sys.argv[2],
                                             headers=json.loads(sys.argv[3]))
            context = ssl.create_default_context(cafile=sys.argv[4]) if sys.argv[4] else None
            try:
                response = urllib.request.urlopen(request, timeout=10, context=context)
            except urllib.error.HTTPError as error:
                response = error
            body = response.read()
            print(json.dumps({"status": response.status if hasattr(response, "status") else response.code,
                              "headers": {k.lower(): v for k, v in response.headers.items()},
                              "body": body.hex()}))
            """
        let encoded = String(decoding: try JSONSerialization.data(withJSONObject: headers), as: UTF8.self)
        let (text, status) = try runProcess(NodeMetricsTests.python, ["-c", script, path, method, encoded, ca ?? ""])
        guard status == 0, let data = text.data(using: .utf8),
            let object = try JSONSerialization.jsonObject(with: data) as? [String: Any],
            let code = object["status"] as? Int, let headers = object["headers"] as? [String: String],
            let hex = object["body"] as? String
        else { throw TestSocketError(description: "HTTP \(method) \(path) failed: \(text)") }
        var body: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            body.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return Reply(status: code, headers: headers, body: body)
    }

    static func node(_ extra: [String] = []) throws -> (NodeProcess, Int) {
        let httpPort = try NodeMetricsTests.freePort()
        let node = try NodeProcess(
            arguments: ["--http-port", "\(httpPort)", "--http-values", "--disk-limit", "0"] + extra
        )
        return (node, httpPort)
    }

    static let value = (0..<3000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 1) }

    @Test func wholeValuesRangesHeadsAndMisses() throws {
        let (node, port) = try Self.node()
        let socket = try node.connect()
        #expect(
            try socket.roundTrip(.put(key: Array("films/intro.webm".utf8), value: Self.value, ttl: 0)).status == .ok
        )
        #expect(try socket.roundTrip(.put(key: Array("a key".utf8), value: Array("spaced".utf8), ttl: 0)).status == .ok)

        let whole = try Self.request(port, "/values/films/intro.webm")
        #expect(
            whole.status == 200 && whole.body == Self.value,
            "\(whole.status) \(String(decoding: whole.body, as: UTF8.self))"
        )
        #expect(whole.headers["content-type"] == "video/webm" && whole.headers["accept-ranges"] == "bytes")
        #expect(whole.headers["content-length"] == "3000")
        #expect(try Self.request(port, "/values/a%20key").body == Array("spaced".utf8), "a percent-encoded key")
        // Keys are decoded once, from the path as sent: a % of its own, a trailing slash.
        for key in ["100%", "dir/"] {
            #expect(try socket.roundTrip(.put(key: Array(key.utf8), value: Array(key.utf8), ttl: 0)).status == .ok)
        }
        #expect(try Self.request(port, "/values/100%25").body == Array("100%".utf8))
        #expect(try Self.request(port, "/values/dir/").body == Array("dir/".utf8))

        let cases: [(String, Range<Int>)] = [
            ("bytes=0-99", 0..<100), ("bytes=2999-", 2999..<3000), ("bytes=1000-1999", 1000..<2000),
            ("bytes=2990-5000", 2990..<3000), ("bytes=-10", 2990..<3000), ("bytes=-5000", 0..<3000),
        ]
        for (range, expected) in cases {
            let reply = try Self.request(port, "/values/films/intro.webm", headers: ["Range": range])
            #expect(reply.status == 206 && reply.body == Array(Self.value[expected]), "\(range)")
            let contentRange = "bytes \(expected.lowerBound)-\(expected.upperBound - 1)/3000"
            #expect(reply.headers["content-range"] == contentRange, "\(range): \(reply.headers)")
            #expect(reply.headers["content-length"] == "\(expected.count)")
        }
        for range in ["bytes=3000-", "bytes=5000-6000", "bytes=-0"] {
            let reply = try Self.request(port, "/values/films/intro.webm", headers: ["Range": range])
            #expect(
                reply.status == 416 && reply.headers["content-range"] == "bytes */3000",
                "\(range): \(reply.status)"
            )
        }
        // Not a single byte range: ignored, the whole value (RFC 9110 allows it).
        let several = try Self.request(port, "/values/films/intro.webm", headers: ["Range": "bytes=0-1,5-6"])
        #expect(several.status == 200 && several.body.count == 3000)

        let head = try Self.request(port, "/values/films/intro.webm", method: "HEAD")
        #expect(head.status == 200 && head.body.isEmpty && head.headers["content-length"] == "3000")
        let headRange = try Self.request(
            port,
            "/values/films/intro.webm",
            method: "HEAD",
            headers: ["Range": "bytes=10-19"]
        )
        #expect(
            headRange.status == 206 && headRange.body.isEmpty
                && headRange.headers["content-range"] == "bytes 10-19/3000"
        )

        #expect(try Self.request(port, "/values/absent").status == 404)
        let headMiss = try Self.request(port, "/values/absent", method: "HEAD")
        #expect(headMiss.status == 404 && headMiss.body.isEmpty, "a HEAD answer has no body, errors included")
        #expect(try Self.request(port, "/values/").status == 400, "no key")
        #expect(try Self.request(port, "/values/%zz").status == 400, "a bad escape")
        let metrics = try Self.request(port, "/metrics")
        #expect(
            String(decoding: metrics.body, as: UTF8.self).contains(#"cachet_http_responses_total{code="206"} 7"#)
        )
    }

    @Test func aValueSentInPartsIsServedWholeAndByRangeWithItsETag() throws {
        let directory = TemporaryDirectory(prefix: "cachet-http-large")
        defer { directory.remove() }
        // More than one frame and than the memory tier: served a part at a time.
        let (node, port) = try Self.node([
            "--data-dir", directory.path, "--disk-limit", "128MiB", "--max-frame", "2MiB", "--memory-limit", "4MiB",
        ])
        let socket = try node.connect()
        let value = PatternBytes.make(count: 9_000_001, step: 37, seed: 8)
        let key = Array("films/long.webm".utf8)
        #expect(try NodeUploadTests.upload(value, key: key, size: 1_500_000, on: socket).allSatisfy { $0 == .ok })
        let whole = try Self.request(port, "/values/films/long.webm")
        #expect(whole.status == 200 && whole.headers["content-length"] == "9000001")
        #expect((whole.body == value) == true, "byte-exact, \(whole.body.count) bytes")
        let etag = try #require(whole.headers["etag"])
        #expect(etag.hasPrefix("\"") && etag.count > 2)
        let tail = try Self.request(port, "/values/films/long.webm", headers: ["Range": "bytes=1048000-5000000"])
        #expect(tail.status == 206 && tail.headers["etag"] == etag)
        #expect((tail.body == Array(value[1_048_000...5_000_000])) == true)
        // A last byte at the largest offset there is: to the end (it once overflowed and stopped the node).
        let far = try Self.request(
            port,
            "/values/films/long.webm",
            headers: ["Range": "bytes=8999990-18446744073709551615"]
        )
        #expect(far.status == 206 && far.body == Array(value[8_999_990...]))
        let suffix = try Self.request(port, "/values/films/long.webm", headers: ["Range": "bytes=-3000000"])
        #expect(suffix.status == 206 && (suffix.body == Array(value[6_000_001...])) == true)
        // Conditional requests: the same tag is not sent again; a Range for another version is the whole value.
        let unchanged = try Self.request(port, "/values/films/long.webm", headers: ["If-None-Match": etag])
        #expect(unchanged.status == 304 && unchanged.body.isEmpty)
        let other = try Self.request(
            port,
            "/values/films/long.webm",
            headers: ["Range": "bytes=0-9", "If-Range": "\"0\""]
        )
        #expect(other.status == 200 && other.body.count == value.count)
        let same = try Self.request(port, "/values/films/long.webm", headers: ["Range": "bytes=0-9", "If-Range": etag])
        #expect(same.status == 206 && same.body == Array(value[0..<10]))
        // A new value has a new tag.
        #expect(try socket.roundTrip(.put(key: key, value: [1, 2, 3], ttl: 0)).status == .ok)
        let replaced = try Self.request(port, "/values/films/long.webm", headers: ["If-None-Match": etag])
        #expect(replaced.status == 200 && replaced.body == [1, 2, 3] && replaced.headers["etag"] != etag)
    }

    @Test func usersSignInWithBasicOrABearerTokenAndKeepTheirPrefixes() throws {
        let directory = TemporaryDirectory(prefix: "cachet-http-users")
        defer { directory.remove() }
        let file = directory.appending("users.json")
        try NodeAuthTests.writeAuthFile(file, NodeAuthTests.users)
        let (node, port) = try Self.node(["--auth-file", file])
        let socket = try node.connect()
        #expect(
            try socket.roundTrip(.auth(user: Array("ops".utf8), secret: Array("ops-secret-0123456789".utf8))).status
                == .ok
        )
        #expect(try socket.roundTrip(.put(key: Array("shop:clip".utf8), value: [1, 2, 3], ttl: 0)).status == .ok)
        #expect(try socket.roundTrip(.put(key: Array("other".utf8), value: [4], ttl: 0)).status == .ok)

        func basic(_ user: String, _ secret: String) -> [String: String] {
            ["Authorization": "Basic " + Data("\(user):\(secret)".utf8).base64EncodedString()]
        }
        let anonymous = try Self.request(port, "/values/shop:clip")
        #expect(
            anonymous.status == 401
                && anonymous.headers["www-authenticate"] == #"Basic realm="cachet", Bearer realm="cachet""#
        )
        #expect(try Self.request(port, "/values/shop:clip", headers: basic("shop", "wrong")).status == 401)
        let shop = try Self.request(port, "/values/shop:clip", headers: basic("shop", "shop-secret-0123456789"))
        #expect(shop.status == 200 && shop.body == [1, 2, 3])
        #expect(try Self.request(port, "/values/other", headers: basic("shop", "shop-secret-0123456789")).status == 403)
        let reader = try Self.request(port, "/values/other", headers: basic("reader", "reader-secret-0123456789"))
        #expect(reader.status == 200 && reader.body == [4])
        #expect(try Self.request(port, "/values/other", headers: ["Authorization": "Bearer x"]).status == 400)
        #expect(try Self.request(port, "/values/other", headers: ["Authorization": "Digest x"]).status == 400)

        // A bearer token USER:SECRET, in the header or (for a player that sets no headers) in the query.
        let bearer = try Self.request(
            port,
            "/values/shop:clip",
            headers: ["Authorization": "Bearer shop:shop-secret-0123456789"]
        )
        #expect(bearer.status == 200 && bearer.body == [1, 2, 3])
        #expect(
            try Self.request(port, "/values/other", headers: ["Authorization": "Bearer shop:shop-secret-0123456789"])
                .status == 403
        )
        let query = try Self.request(port, "/values/shop:clip?access_token=shop%3Ashop-secret-0123456789")
        #expect(query.status == 200 && query.body == [1, 2, 3])
        #expect(try Self.request(port, "/values/shop:clip?access_token=shop%3Awrong").status == 401)
        #expect(try Self.request(port, "/values/shop:clip?access_token=nocolon").status == 400)
    }

    @Test func aTLSOnlyNodeServesItsValuesOverHTTPSOnly() throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let httpsPort = try NodeMetricsTests.freePort()
        let (node, port) = try Self.node([
            "--tls-only", "--tls-cert", certificates.serverCertificate, "--tls-key", certificates.serverKey,
            "--tls-ca", certificates.caFile, "--https-port", "\(httpsPort)",
        ])
        let secure = try CachetBlockingConnection(
            to: CachetAddress(host: "127.0.0.1", port: node.port),
            timeout: .seconds(5),
            tls: try NodeTLSTests.client(ca: certificates.caFile)
        )
        let key = Array("films/tls.webm".utf8)
        let large = PatternBytes.make(count: 3 << 20, seed: 7)
        #expect(try NodeTLSTests.roundTrip(.put(key: key, value: large, ttl: 0), on: secure).status == .ok)
        let whole = try Self.request(httpsPort, "/values/films/tls.webm", ca: certificates.caFile)
        #expect(whole.status == 200 && whole.body == large, "\(whole.status) \(whole.body.count) bytes")
        let part = try Self.request(
            httpsPort,
            "/values/films/tls.webm",
            headers: ["Range": "bytes=1048570-2097160"],
            ca: certificates.caFile
        )
        #expect(part.status == 206 && part.body == Array(large[1_048_570...2_097_160]), "across a piece's end")
        #expect(try Self.request(httpsPort, "/metrics", ca: certificates.caFile).status == 200)
        // The plain HTTP port still serves metrics and health, but no values: they travel only encrypted.
        let plain = try Self.request(port, "/values/films/tls.webm")
        #expect(plain.status == 403 && String(decoding: plain.body, as: UTF8.self).contains("--https-port"))
        #expect(try Self.request(port, "/health/live").status == 200)
    }

    @Test func aKeyAnotherMemberOwnsIsReadThroughTheMemberAsked() throws {
        let httpPort = try NodeMetricsTests.freePort()
        let cluster = try NodeForwardingTests.Cluster()
        let key = cluster.key(ownedBy: "n2")
        #expect(
            try cluster.node("n2").connect().roundTrip(.put(key: Array(key.utf8), value: Self.value, ttl: 0)).status
                == .ok
        )
        // n1 again, with the HTTP values on: it owns no copy of the key and forwards the range to n2.
        _ = cluster.node("n1").stop()
        try cluster.start("n1", extraArguments: ["--http-port", "\(httpPort)", "--http-values"])
        let reply = try Self.request(httpPort, "/values/" + key, headers: ["Range": "bytes=100-199"])
        #expect(reply.status == 206 && reply.body == Array(Self.value[100..<200]))
    }

    /// A short WebM video, made with ffmpeg now, stored with cachet-cli beside a page that shows it; headless
    /// Chromium loads the page from the node, reaches the video's duration, plays it, seeks to the middle
    /// (a range request) and plays on from there, as the page's `<video>` element reports.
    @Test func aBrowserPlaysAVideoFromTheCacheAndSeeksInIt() throws {
        let directory = TemporaryDirectory(prefix: "cachet-video")
        defer { directory.remove() }
        let video = directory.appending("clip.webm")
        let page = directory.appending("player.html")
        let (made, status) = try runProcess(
            "/usr/bin/ffmpeg",
            [
                // Noise, so that the file (about 5 MB) is sent in parts and stored in blocks, as real video is.
                "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=duration=20:size=640x360:rate=25", "-vf",
                "noise=alls=30:allf=t", "-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8", "-g", "25",
                "-b:v", "2M", "-y", video,
            ]
        )
        try #require(status == 0, "ffmpeg: \(made)")
        try Data(
            #"<!doctype html><html><body><video id="clip" src="clip.webm" muted preload="metadata"></video></body></html>"#
                .utf8
        )
        .write(to: URL(fileURLWithPath: page))
        // A node as video is cached: values over 1 MiB stored in parts on its disk tier, in blocks.
        let (node, port) = try Self.node(["--data-dir", directory.appending("data"), "--disk-limit", "256MiB"])
        for (key, file) in [("site/clip.webm", video), ("site/player.html", page)] {
            let cli = BuiltProducts.path(of: "cachet-cli")
            let (output, code) = try runProcess(cli, ["--port", "\(node.port)", "put", key, "@" + file])
            #expect(code == 0 && output.hasPrefix("OK"), "\(output)")
        }
        #expect(try node.stats()["uploads_completed"] as? Int == 1, "the video went in parts")
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Browser/play-video.py").path
        // Niced: Chromium's processes must not starve the node tests that run beside this one.
        let (output, code) = try runProcess(
            "/usr/bin/nice",
            [
                "-n", "10", NodeMetricsTests.python, script, "http://127.0.0.1:\(port)/values/site/player.html",
                "--timeout", "40",
            ]
        )
        let line = output.split(separator: "\n").last.map(String.init) ?? ""
        let result = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        #expect(code == 0, "the page: \(output)")
        let duration = result?["duration"] as? Double ?? 0
        #expect(duration > 19 && duration < 21, "\(output)")
        #expect(
            result?["seeked"] as? Bool == true && (result?["after_seek"] as? Double ?? 0) > duration / 2,
            "\(output)"
        )
        let metrics = String(decoding: try Self.request(port, "/metrics").body, as: UTF8.self)
        #expect(metrics.contains(#"cachet_http_responses_total{code="206"}"#), "the player asked for ranges")
    }
}
