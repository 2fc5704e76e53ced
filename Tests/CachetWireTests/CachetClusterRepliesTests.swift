import CachetTestSupport
import CachetWire
import Foundation
import Testing

/// `Protocol/vectors/cluster-replies.json`, written by `Protocol/tools/make-vectors.py` from
/// `Protocol/PROTOCOL.md`: the Swift encoders must give every body byte for byte, and the CLEAR decoder
/// must read it back.
@Suite("Cluster-wide CLEAR and STATS replies")
struct CachetClusterRepliesTests {
    static var document: [String: Any] {
        let path = ProtocolVector.directory + "/cluster-replies.json"
        let data = FileManager.default.contents(atPath: path) ?? Data()
        return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:]
    }

    static var cases: [[String: Any]] { document["cases"] as? [[String: Any]] ?? [] }

    static func bytes(hex: String) -> [UInt8] {
        let digits = Array(hex.utf8)
        return stride(from: 0, to: digits.count, by: 2).map {
            UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)!
        }
    }

    @Test func theFileHasCasesOfBothOpcodesAndTheSameTotalFields() {
        #expect(Self.cases.filter { $0["opcode"] as? String == "CLEAR" }.count >= 3)
        #expect(Self.cases.filter { $0["opcode"] as? String == "STATS" }.count >= 3)
        #expect(Self.document["total_fields"] as? [String] == CachetClusterStatsReply.totalFields)
    }

    @Test func clearBodiesEncodeAndDecodeExactly() throws {
        for testCase in Self.cases where testCase["opcode"] as? String == "CLEAR" {
            let name = testCase["name"] as? String ?? "?"
            let members = (testCase["members"] as? [[String: Any]] ?? []).map { member in
                CachetClusterClearReply.Member(
                    id: member["id"] as! String,
                    status: CachetStatus(rawValue: UInt16(member["status"] as! Int)),
                    result: CachetClearResult(
                        items: (member["items"] as! NSNumber).uint64Value,
                        bytes: (member["bytes"] as! NSNumber).uint64Value
                    ),
                    message: member["message"] as! String
                )
            }
            let expected = Self.bytes(hex: testCase["body_hex"] as! String)
            let reply = CachetClusterClearReply(members: members)
            #expect(reply.encoded == expected, "\(name)")
            let total = testCase["total"] as! [String: Any]
            #expect(reply.total.items == (total["items"] as! NSNumber).uint64Value, "\(name)")
            #expect(reply.total.bytes == (total["bytes"] as! NSNumber).uint64Value, "\(name)")
            let decoded = try CachetClusterClearReply(decoding: expected)
            #expect(decoded == reply, "\(name)")
            #expect(CachetClusterClearReply.isAggregate(expected), "\(name)")
        }
    }

    @Test func statsBodiesEncodeExactlyAndParseAsJSON() throws {
        for testCase in Self.cases where testCase["opcode"] as? String == "STATS" {
            let name = testCase["name"] as? String ?? "?"
            let members = (testCase["members"] as? [[String: Any]] ?? []).map { member in
                CachetClusterStatsReply.Member(
                    id: member["id"] as! String,
                    status: CachetStatus(rawValue: UInt16(member["status"] as! Int)),
                    body: Array((member["body"] as! String).utf8)
                )
            }
            let reply = CachetClusterStatsReply(
                answeredBy: testCase["answered_by"] as! String,
                clusterHash: testCase["cluster_hash"] as! String,
                members: members
            )
            let expected = Array((testCase["body"] as! String).utf8)
            #expect(reply.encoded == expected, "\(name): \(String(decoding: reply.encoded, as: UTF8.self))")
            let parsed = try JSONSerialization.jsonObject(with: Data(reply.encoded)) as? [String: Any]
            #expect((parsed?["members"] as? [Any])?.count == members.count, "\(name)")
        }
    }

    @Test func aPlainClearBodyIsNotAnAggregate() throws {
        #expect(!CachetClusterClearReply.isAggregate(CachetClearResult(items: 1, bytes: 2).encoded))
        #expect(CachetClusterClearReply.isAggregate(CachetClusterClearReply(members: []).encoded))
    }

    @Test(arguments: [
        [UInt8](), Array(repeating: 0, count: 17), Array(repeating: 0, count: 16) + [0, 1],
        Array(repeating: 0, count: 16) + [0, 0, 9],
        Array(repeating: 0, count: 16) + [0, 1, 0, 3, 0x61, 0x62],
    ])
    func truncatedOrOverlongClearBodiesAreMalformed(body: [UInt8]) {
        #expect(throws: CachetWireError.self) { try CachetClusterClearReply(decoding: body) }
    }

    @Test func aMessageOverTheLimitIsCutAtACharacterBoundary() throws {
        let message = String(repeating: "a", count: 1023) + "é" + "tail"
        let reply = CachetClusterClearReply(members: [.init(id: "n1", status: .unavailable, message: message)])
        let decoded = try CachetClusterClearReply(decoding: reply.encoded)
        #expect(decoded.members[0].message == String(repeating: "a", count: 1023))
    }

    @Test func anOKMemberWithABodyThatIsNotAnObjectIsReportedAsAnError() throws {
        for bad in ["", "[]", "{\"items\":1", "{\"items\":1}x", "{\"a\" 1}", "{\"a\":\"unterminated}"] {
            let reply = CachetClusterStatsReply(
                answeredBy: "n1",
                clusterHash: "0000000000000000",
                members: [.init(id: "n1", status: .ok, body: Array(bad.utf8))]
            )
            let parsed = try JSONSerialization.jsonObject(with: Data(reply.encoded)) as? [String: Any]
            let member = (parsed?["members"] as? [[String: Any]])?.first
            #expect(member?["status"] as? String == "server_error", "\(bad)")
            #expect(parsed?["members_ok"] as? Int == 0, "\(bad)")
        }
    }

    @Test func totalsSaturateAndIgnoreNonIntegers() throws {
        let reply = CachetClusterStatsReply(
            answeredBy: "n1",
            clusterHash: "0000000000000000",
            members: [
                .init(id: "a", status: .ok, body: Array("{\"items\":18446744073709551615,\"gets\":-1}".utf8)),
                .init(id: "b", status: .ok, body: Array("{\"items\":99999999999999999999999,\"gets\":1.5}".utf8)),
            ]
        )
        let parsed = try JSONSerialization.jsonObject(with: Data(reply.encoded)) as? [String: Any]
        let totals = parsed?["totals"] as? [String: Any]
        #expect((totals?["items"] as? NSNumber)?.uint64Value == UInt64.max)
        #expect((totals?["gets"] as? NSNumber)?.uint64Value == 0)
    }
}

@Suite("Request flags")
struct CachetRequestFlagsTests {
    @Test func definedBitsAndUndefinedOnes() {
        #expect(CachetRequestFlags.forwarded.rawValue == 1 && CachetRequestFlags.cluster.rawValue == 2)
        #expect(CachetRequestFlags.invalidation.rawValue == 4 && CachetRequestFlags.lastHop.rawValue == 8)
        #expect(CachetRequestFlags.leaving.rawValue == 0x10)
        #expect(CachetRequestFlags.warmUp.rawValue == 0x20)
        #expect(CachetRequestFlags.lease.rawValue == 0x40 && CachetRequestFlags.ttl.rawValue == 0x80)
        #expect(CachetRequestFlags.fromOwner.rawValue == 0x100 && CachetRequestFlags.relayed.rawValue == 0x200)
        #expect(CachetRequestFlags.holdCheck.rawValue == 0x400 && CachetRequestFlags.viewCheck.rawValue == 0x800)
        #expect(CachetRequestFlags.range.rawValue == 0x1000 && CachetRequestFlags.part.rawValue == 0x2000)
        #expect(CachetRequestFlags.frames.rawValue == 0x4000 && CachetRequestFlags.item.rawValue == 0x8000)
        // Every bit is defined in this revision: none is left undefined.
        #expect(CachetFrameHeader(opcode: .get, word: 0x8001, id: 1).requestFlags == [.forwarded, .item])
        #expect(CachetFrameHeader(opcode: .get, word: 0xc000, id: 1).requestFlags == [.frames, .item])
        #expect(CachetRequestFlags(rawValue: 0xffff).undefinedBits == 0)
        #expect(CachetRequestFlags(rawValue: 0x0080).description == "ttl")
        #expect(CachetRequestFlags(rawValue: 0x0040).description == "lease")
        #expect(CachetRequestFlags(rawValue: 0x0021).description == "forwarded|warmUp")
        #expect(CachetRequestFlags(rawValue: 0x0011).description == "forwarded|leaving")
        #expect(CachetRequestFlags(rawValue: 0x000d).description == "forwarded|invalidation|lastHop")
        #expect(CachetRequestFlags(rawValue: 0x8003).description == "forwarded|cluster|item")
        #expect(CachetRequestFlags(rawValue: 0x4081).description == "forwarded|ttl|frames")
        #expect(CachetRequestFlags(rawValue: 0xc002).description == "cluster|frames|item")
        #expect(CachetRequestFlags(rawValue: 0x2001).description == "forwarded|part")
        #expect(CachetRequestFlags(rawValue: 0x1001).description == "forwarded|range")
        #expect(CachetRequestFlags(rawValue: 0x0801).description == "forwarded|viewCheck")
        #expect(CachetRequestFlags(rawValue: 0x0401).description == "forwarded|holdCheck")
        #expect(CachetRequestFlags(rawValue: 0x030d).description == "forwarded|invalidation|lastHop|fromOwner|relayed")
        #expect(CachetRequestFlags(rawValue: 0x010d).description == "forwarded|invalidation|lastHop|fromOwner")
        #expect(CachetRequestFlags(rawValue: 0x0005).description == "forwarded|invalidation")
        #expect(CachetRequestFlags().description == "none")
    }

    @Test func aLeavingNoticeIsAPingWithForwardedAndLeavingAndTheMembersId() throws {
        let bytes = CachetCommand.leavingNotice(memberID: "n1", id: 7)
        #expect(bytes == [0, 0, 0, 10, 1, 6, 0, 0x11, 0, 0, 0, 7, 0x6e, 0x31])
        let frame = try bytes.withUnsafeBytes { try CachetFrameDecoder.decodeFrame(in: $0) }
        #expect(frame?.header.requestFlags == [.forwarded, .leaving] && frame?.header.opcode == .ping)
    }

    @Test func onlyClusterWithoutForwardedOnClearOrStatsFansOut() {
        for raw in UInt16(0)...3 {
            for opcode in UInt8(0)...8 {
                let flags = CachetRequestFlags(rawValue: raw)
                let op = CachetOpcode(rawValue: opcode)
                let expected = raw == 2 && (op == .clear || op == .stats)
                #expect(flags.fansOut(for: op) == expected, "\(flags) \(opcode)")
            }
        }
    }

    @Test func commandsEncodeTheirFlagsAndDecodeWhateverTheFlags() throws {
        let commands: [CachetCommand] = [.put(key: [1], value: [2], ttl: 3), .get(key: [4]), .clear, .stats]
        for command in commands {
            for flags: CachetRequestFlags in [
                [], .forwarded, .cluster, [.forwarded, .cluster], .init(rawValue: 0xcfbf),
            ] {
                let bytes = command.encoded(id: 9, flags: flags)
                #expect(bytes[6] == UInt8(flags.rawValue >> 8) && bytes[7] == UInt8(flags.rawValue & 0xff))
                let frame = try bytes.withUnsafeBytes { try CachetFrameDecoder.decodeFrame(in: $0) }
                #expect(frame?.header.requestFlags.rawValue == flags.rawValue & CachetRequestFlags.defined.rawValue)
                let decoded = try bytes.withUnsafeBytes { try CachetCommand.decode(frame: frame!, in: $0) }
                #expect(decoded == command)
            }
            #expect(command.encoded(id: 9) == command.encoded(id: 9, flags: []))
        }
        // A leased PUT carries the lease flag and its token before the PUT body, and decodes as itself.
        let leased = CachetCommand.leasedPut(key: [1], value: [2], ttl: 3, token: 0x0102_0304_0506_0708)
        let bytes = leased.encoded(id: 9)
        #expect(bytes[7] == 0x40 && Array(bytes[12..<20]) == [1, 2, 3, 4, 5, 6, 7, 8])
        let frame = try bytes.withUnsafeBytes { try CachetFrameDecoder.decodeFrame(in: $0) }
        #expect(try bytes.withUnsafeBytes { try CachetCommand.decode(frame: frame!, in: $0) } == leased)
    }
}
