import CachetCluster
import CachetRing
import Foundation
import Testing

/// `Protocol/vectors/cluster.json`, written by `Protocol/tools/make-ring-vectors.py` from `Protocol/CLUSTER.md`
/// over Python's xxhash: every cluster file in it must give the same members, canonical text, membership hash
/// and owners by id.
@Suite("Cluster vectors")
struct ClusterVectorTests {
    struct Key: Sendable {
        var bytes: [UInt8]
        var owner: String
        var preference: [String]
    }

    struct Case: CustomTestStringConvertible, Sendable {
        var name: String
        /// The cluster file, serialized again from the vector.
        var file: [UInt8]
        var members: [CachetClusterMember]
        var canonicalText: String
        var hash: String
        var keys: [Key]

        var testDescription: String { name }
    }

    static let cases: [Case] = {
        let path = DeployFiles.path("Protocol/vectors/cluster.json")
        guard let data = FileManager.default.contents(atPath: path),
            let document = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let cases = document["cases"] as? [[String: Any]]
        else { preconditionFailure("\(path) is missing or not a vector file") }
        return cases.map { entry in
            Case(
                name: entry["name"] as! String,
                file: Array(try! JSONSerialization.data(withJSONObject: entry["file"]!)),
                members: (entry["members"] as! [[String: Any]]).map {
                    CachetClusterMember(id: $0["id"] as? String, host: $0["host"] as! String, port: $0["port"] as! Int)
                },
                canonicalText: entry["canonical_text"] as! String,
                hash: entry["hash"] as! String,
                keys: (entry["keys"] as! [[String: Any]]).map {
                    Key(
                        bytes: bytes(hex: $0["key_hex"] as! String),
                        owner: $0["owner"] as! String,
                        preference: $0["preference"] as! [String]
                    )
                }
            )
        }
    }()

    @Test func theFileHoldsTheCasesCLUSTERmdPromises() {
        #expect(Self.cases.count >= 5)
        #expect(Set(Self.cases.map(\.hash)).count == Self.cases.count, "every case is another membership")
    }

    static func bytes(hex: String) -> [UInt8] {
        let digits = Array(hex.utf8)
        return stride(from: 0, to: digits.count, by: 2).map {
            UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)!
        }
    }

    @Test(arguments: cases)
    func aCase(_ vector: Case) throws {
        let membership = try CachetMembership(json: vector.file)
        #expect(membership.members == vector.members)
        #expect(membership.canonicalText == vector.canonicalText)
        #expect(membership.membershipHashText == vector.hash)
        for key in vector.keys {
            #expect(membership.owner(of: key.bytes).id == key.owner)
            #expect(membership.preferenceList(for: key.bytes, count: 2).map(\.id) == key.preference)
        }
    }
}
