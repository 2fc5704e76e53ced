import CachetRing
import Foundation
import Testing

/// `Protocol/vectors/ring.json`, written by `Protocol/tools/make-ring-vectors.py` with its own ring over
/// Python's xxhash: the Swift ring must give every hash, point, owner and preference list in it.
@Suite("Ring vectors")
struct RingVectorTests {
    struct File: Decodable {
        var xxh64: [HashVector]
        var rings: [Ring]
    }

    struct HashVector: Decodable {
        var input_hex: String
        var hash: String
    }

    struct Ring: Decodable, CustomTestStringConvertible {
        var name: String
        var members: [String]
        var virtual_nodes_per_member: Int
        var first_points: [Point]
        var preference_count: Int
        var keys: [Key]

        var testDescription: String { name }
    }

    struct Point: Decodable {
        var hash: String
        var member: String
    }

    struct Key: Decodable {
        var key_hex: String
        var key: String?
        var hash: String
        var owner: String
        var preference: [String]
    }

    static let path = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Protocol/vectors/ring.json").path

    static let file: File = {
        do {
            return try JSONDecoder().decode(File.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
        } catch {
            preconditionFailure("\(path): \(error)")
        }
    }()

    static func bytes(hex: String) -> [UInt8] {
        let digits = Array(hex.utf8)
        precondition(digits.count % 2 == 0, "odd hex \(hex)")
        return stride(from: 0, to: digits.count, by: 2).map {
            UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)!
        }
    }

    static func hash(hex: String) -> UInt64 {
        precondition(hex.utf8.count == 16, "a hash is 16 hex digits: \(hex)")
        return UInt64(hex, radix: 16)!
    }

    @Test func theFileHasWhatTheSpecificationPromises() {
        #expect(Self.file.xxh64.count >= 10)
        #expect(Self.file.rings.count == 4)
        #expect(Self.file.rings[0].keys.count == 50)
        #expect(Self.file.rings[0].virtual_nodes_per_member == CachetRing.defaultVirtualNodesPerMember)
        #expect(Self.file.rings[0].preference_count == 2)
        // Members named by id (a cluster file's), not by address, including one id that is a prefix of another.
        let named = Self.file.rings.filter { $0.members.allSatisfy { !$0.contains(":") } }
        #expect(named.count == 2)
        #expect(named.contains { ring in ring.members.contains { other in ring.members.contains { $0 != other && $0.hasPrefix(other) } } })
        #expect(named.contains { $0.members.contains { !$0.allSatisfy(\.isASCII) } })
    }

    @Test func xxh64() {
        for vector in Self.file.xxh64 {
            let actual = Self.bytes(hex: vector.input_hex).withUnsafeBytes { CachetRing.hash($0) }
            #expect(actual == Self.hash(hex: vector.hash), "input \(vector.input_hex)")
        }
    }

    @Test(arguments: file.rings)
    func ring(_ vector: Ring) throws {
        let ring = try CachetRing(members: vector.members, virtualNodesPerMember: vector.virtual_nodes_per_member)
        let points = ring._points
        for (point, expected) in zip(points, vector.first_points) {
            #expect(point.hash == Self.hash(hex: expected.hash))
            #expect(ring.members[point.member] == expected.member)
        }
        for entry in vector.keys {
            let key = Self.bytes(hex: entry.key_hex)
            if let text = entry.key { #expect(Array(text.utf8) == key, "key and key_hex differ: \(text)") }
            #expect(key.withUnsafeBytes { CachetRing.hash($0) } == Self.hash(hex: entry.hash), "\(entry.key_hex)")
            #expect(ring.members[ring.owner(of: key)] == entry.owner, "owner of \(entry.key ?? entry.key_hex)")
            let list = ring.preferenceList(for: key, count: vector.preference_count).map { ring.members[$0] }
            #expect(list == entry.preference, "preference list of \(entry.key ?? entry.key_hex)")
        }
    }
}
