import CachetCluster
import CachetTestSupport
import Foundation
import Testing

@Suite("Cluster file")
struct CachetClusterFileTests {
    /// A document that must be refused, the code it must give, and words its message must hold.
    struct Refusal: CustomTestStringConvertible, Sendable {
        var name: String
        var text: String
        var code: CachetClusterError.Code
        var words: [String]
        var memberIndex: Int?

        var testDescription: String { name }
    }

    static let refusals: [Refusal] = [
        Refusal(
            name: "not JSON",
            text: "{\"members\": [\n  {\"id\": \"n1\", \"host\": \"h\" \"port\": 1}\n]}",
            code: .invalidJSON,
            words: ["line 2, column 28", "',' or '}'"]
        ),
        Refusal(name: "empty", text: "", code: .invalidJSON, words: ["line 1, column 1", "ends"]),
        Refusal(
            name: "trailing comma",
            text: #"{"members": [{"host": "h", "port": 1},]}"#,
            code: .invalidJSON,
            words: ["line 1, column 39"]
        ),
        Refusal(
            name: "trailing data",
            text: #"{"members": [{"host": "h", "port": 1}]} {}"#,
            code: .invalidJSON,
            words: ["after the JSON value"]
        ),
        Refusal(
            name: "a field twice",
            text: #"{"members": [{"host": "h", "port": 1, "port": 2}]}"#,
            code: .invalidJSON,
            words: ["\"port\" appears twice", "column 39"]
        ),
        Refusal(name: "an array", text: "[]", code: .wrongType, words: ["an array, not an object"]),
        Refusal(name: "no members", text: "{}", code: .missingField, words: ["no \"members\""]),
        Refusal(
            name: "members not a list",
            text: #"{"members": {"host": "h"}}"#,
            code: .wrongType,
            words: ["\"members\"", "an object, not a list"]
        ),
        Refusal(name: "empty member list", text: #"{"members": []}"#, code: .noMembers, words: ["empty"]),
        Refusal(
            name: "unknown top-level field",
            text: "{\"members\": [{\"host\": \"h\", \"port\": 1}],\n \"virtual_nodes\": 10}",
            code: .unknownField,
            words: ["\"virtual_nodes\"", "line 2", "virtual_nodes_per_member"]
        ),
        Refusal(
            name: "misspelt member field",
            text: #"{"members": [{"host": "h", "port": 1}, {"hots": "h", "port": 2}]}"#,
            code: .unknownField,
            words: ["members[1]", "\"hots\""],
            memberIndex: 1
        ),
        Refusal(
            name: "member not an object",
            text: #"{"members": ["127.0.0.1:7420"]}"#,
            code: .wrongType,
            words: ["members[0]", "a string, not an object"],
            memberIndex: 0
        ),
        Refusal(
            name: "no host",
            text: #"{"members": [{"id": "n1", "port": 1}]}"#,
            code: .missingField,
            words: ["members[0]", "no \"host\""],
            memberIndex: 0
        ),
        Refusal(
            name: "no port",
            text: #"{"members": [{"id": "n1", "host": "h"}]}"#,
            code: .missingField,
            words: ["members[0]", "no \"port\""],
            memberIndex: 0
        ),
        Refusal(
            name: "port as a string",
            text: #"{"members": [{"id": "n1", "host": "h", "port": "7420"}]}"#,
            code: .wrongType,
            words: ["\"port\" is a string"],
            memberIndex: 0
        ),
        Refusal(
            name: "fractional port",
            text: #"{"members": [{"id": "n1", "host": "h", "port": 7420.5}]}"#,
            code: .wrongType,
            words: ["not an integer"],
            memberIndex: 0
        ),
        Refusal(
            name: "id as a number",
            text: #"{"members": [{"id": 1, "host": "h", "port": 7420}]}"#,
            code: .wrongType,
            words: ["\"id\" is a number"],
            memberIndex: 0
        ),
        Refusal(
            name: "port out of range",
            text: #"{"members": [{"id": "n1", "host": "h", "port": 1}, {"id": "n2", "host": "h", "port": 70000}]}"#,
            code: .portOutOfRange,
            words: ["members[1]", "\"n2\"", "70000", "1...65535"],
            memberIndex: 1
        ),
        Refusal(
            name: "port zero",
            text: #"{"members": [{"id": "n1", "host": "h", "port": 0}]}"#,
            code: .portOutOfRange,
            words: ["port 0"],
            memberIndex: 0
        ),
        Refusal(
            name: "empty id",
            text: #"{"members": [{"id": "", "host": "h", "port": 1}]}"#,
            code: .emptyID,
            words: ["members[0]", "the id is empty", "h:1"],
            memberIndex: 0
        ),
        Refusal(
            name: "id with a space",
            text: #"{"members": [{"id": "node 1", "host": "h", "port": 1}]}"#,
            code: .invalidID,
            words: ["whitespace"],
            memberIndex: 0
        ),
        Refusal(
            name: "id with a zero-width space",
            text: #"{"members": [{"id": "n\u200b1", "host": "h", "port": 1}]}"#,
            code: .invalidID,
            words: ["members[0]"],
            memberIndex: 0
        ),
        Refusal(
            name: "id too long",
            text: #"{"members": [{"id": ""# + String(repeating: "x", count: 256) + #"", "host": "h", "port": 1}]}"#,
            code: .invalidID,
            words: ["256 bytes"],
            memberIndex: 0
        ),
        Refusal(
            name: "duplicate id",
            text: """
                {"members": [
                  {"id": "n1", "host": "10.0.0.1", "port": 7420},
                  {"id": "n2", "host": "10.0.0.2", "port": 7420},
                  {"id": "n1", "host": "10.0.0.3", "port": 7420}
                ]}
                """,
            code: .duplicateID,
            words: ["members[2] (id \"n1\", line 4)", "members[0] (id \"n1\", line 2)"],
            memberIndex: 2
        ),
        Refusal(
            name: "an id that is another member's default",
            text: #"{"members": [{"id": "h:2", "host": "h", "port": 1}, {"host": "h", "port": 2}]}"#,
            code: .duplicateID,
            words: ["members[1]", "members[0]"],
            memberIndex: 1
        ),
        Refusal(
            name: "duplicate address",
            text: #"{"members": [{"id": "n1", "host": "h", "port": 1}, {"id": "n2", "host": "h", "port": 1}]}"#,
            code: .duplicateAddress,
            words: ["members[1] (id \"n2\"", "h:1", "members[0] (id \"n1\""],
            memberIndex: 1
        ),
        Refusal(
            name: "empty host",
            text: #"{"members": [{"id": "n1", "host": "", "port": 1}]}"#,
            code: .invalidHost,
            words: ["members[0]", "host \"\""],
            memberIndex: 0
        ),
        Refusal(
            name: "host with a space",
            text: #"{"members": [{"id": "n1", "host": "a b", "port": 1}]}"#,
            code: .invalidHost,
            words: ["\"a b\""],
            memberIndex: 0
        ),
        Refusal(
            name: "virtual node count out of range",
            text: #"{"members": [{"host": "h", "port": 1}], "virtual_nodes_per_member": 0}"#,
            code: .virtualNodeCountOutOfRange,
            words: ["virtual_nodes_per_member 0", "1...4096"]
        ),
        Refusal(
            name: "virtual node count as a string",
            text: #"{"members": [{"host": "h", "port": 1}], "virtual_nodes_per_member": "160"}"#,
            code: .wrongType,
            words: ["virtual_nodes_per_member"]
        ),
        Refusal(
            name: "bad escape",
            text: #"{"members": [{"id": "n\q", "host": "h", "port": 1}]}"#,
            code: .invalidJSON,
            words: ["unknown escape", "column 23"]
        ),
        Refusal(
            name: "lone surrogate",
            text: #"{"members": [{"id": "\ud800", "host": "h", "port": 1}]}"#,
            code: .invalidJSON,
            words: ["surrogate"]
        ),
        Refusal(
            name: "leading zero",
            text: #"{"members": [{"host": "h", "port": 07420}]}"#,
            code: .invalidJSON,
            words: ["leading zero"]
        ),
    ]

    @Test(arguments: refusals)
    func aBadFileIsRefusedWithAMessageThatSaysWhereAndWhy(_ refusal: Refusal) throws {
        let directory = TemporaryDirectory(prefix: "cachet-cluster")
        let path = directory.appending("cluster.json")
        try Data(refusal.text.utf8).write(to: URL(fileURLWithPath: path))
        do {
            let membership = try CachetMembership(contentsOfFile: path)
            Issue.record("accepted: \(membership)")
        } catch {
            #expect(error.code == refusal.code, "\(error)")
            #expect(error.file == path)
            #expect(error.message.hasPrefix("cluster file \(path): "), "\(error.message)")
            #expect(error.memberIndex == refusal.memberIndex, "\(error)")
            for word in refusal.words {
                #expect(error.message.contains(word), "\(error.message) lacks \(word)")
            }
        }
        // The bytes alone give the same code.
        #expect(throws: CachetClusterError.self) { try CachetMembership(json: Array(refusal.text.utf8)) }
    }

    @Test func theMembersAPIChecksTheSameRules() {
        let cases: [([CachetClusterMember], CachetClusterError.Code)] = [
            ([], .noMembers),
            ([CachetClusterMember(id: "", host: "h", port: 1)], .emptyID),
            (
                [CachetClusterMember(id: "a", host: "h", port: 1), CachetClusterMember(id: "a", host: "h", port: 2)],
                .duplicateID
            ),
            (
                [CachetClusterMember(id: "a", host: "h", port: 1), CachetClusterMember(id: "b", host: "h", port: 1)],
                .duplicateAddress
            ),
            ([CachetClusterMember(id: "a", host: "h", port: -1)], .portOutOfRange),
            ([CachetClusterMember(id: "a\tb", host: "h", port: 1)], .invalidID),
        ]
        for (members, code) in cases {
            do {
                _ = try CachetMembership(members: members)
                Issue.record("accepted \(members)")
            } catch {
                #expect(error.code == code, "\(error)")
                #expect(error.file == nil)
                #expect(error.message.hasPrefix("cluster membership: "))
            }
        }
        // Two ids that are the same text in different Unicode forms are two members, as on the ring.
        #expect(
            (try? CachetMembership(members: [
                CachetClusterMember(id: "caf\u{E9}", host: "h", port: 1),
                CachetClusterMember(id: "cafe\u{301}", host: "h", port: 2),
            ]))?.members.count == 2
        )
    }

    @Test func aMissingFileSaysWhichAndWhy() {
        let directory = TemporaryDirectory(prefix: "cachet-cluster")
        let path = directory.appending("absent.json")
        do {
            _ = try CachetMembership(contentsOfFile: path)
            Issue.record("read a missing file")
        } catch {
            #expect(error.code == .unreadableFile)
            #expect(error.message == "cannot read cluster file \(path): No such file or directory")
        }
        do {
            _ = try CachetMembership(contentsOfFile: directory.path)
            Issue.record("read a directory")
        } catch {
            #expect(error.code == .unreadableFile)
        }
    }

    @Test func aFileWithEveryFeatureIsRead() throws {
        let directory = TemporaryDirectory(prefix: "cachet-cluster")
        let path = directory.appending("cluster.json")
        // A byte order mark, escapes, a non-ASCII id, CRLF line ends, the optional count.
        let text =
            "\u{FEFF}{\r\n  \"virtual_nodes_per_member\": 40,\r\n  \"members\": [\r\n"
            + "    {\"id\": \"n\\u00f6d-\\ud83d\\udd11\", \"host\": \"127.0.0.1\", \"port\": 7420},\r\n"
            + "    {\"id\": \"c\\/0\", \"host\": \"cache-0.cachet\", \"port\": 65535},\r\n"
            + "    {\"host\": \"::1\", \"port\": 1}\r\n  ]\r\n}\r\n"
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        let membership = try CachetMembership(contentsOfFile: path)
        #expect(membership.virtualNodesPerMember == 40)
        #expect(membership.ring.virtualNodesPerMember == 40)
        #expect(membership.members.map(\.id) == ["::1:1", "c/0", "nöd-🔑"])
        #expect(membership.member(id: "c/0")?.port == 65535)
        #expect(try CachetMembership(json: Array(text.utf8)) == membership)
    }

    @Test func theExampleFileIsAValidCluster() throws {
        let membership = try CachetMembership(contentsOfFile: DeployFiles.path("deploy/cluster.example.json"))
        #expect(membership.members.count >= 3)
        #expect(membership.members.allSatisfy { $0.id != $0.address }, "the example shows ids")
    }
}
