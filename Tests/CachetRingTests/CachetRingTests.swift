import CachetRing
import CachetTestSupport
import Testing

@Suite("CachetRing")
struct CachetRingTests {
    static func ring(_ members: [String], _ virtualNodes: Int = 160) -> CachetRing {
        do {
            return try CachetRing(members: members, virtualNodesPerMember: virtualNodes)
        } catch {
            preconditionFailure("\(error)")
        }
    }

    static func keys(_ count: Int, seed: UInt64 = 1) -> [[UInt8]] {
        var random = SplitMix64(state: seed)
        return (0..<count).map { _ in
            (0..<Int.random(in: 1...40, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
        }
    }

    // MARK: - Building

    @Test func membersAreSortedByTheirBytesWhateverTheOrderGiven() throws {
        let given = ["127.0.0.1:7422", "10.0.0.1:7420", "127.0.0.1:7420", "localhost:7420", "127.0.0.1:742"]
        let ring = try CachetRing(members: given)
        #expect(
            ring.members == ["10.0.0.1:7420", "127.0.0.1:742", "127.0.0.1:7420", "127.0.0.1:7422", "localhost:7420"]
        )
        #expect(ring.virtualNodesPerMember == CachetRing.defaultVirtualNodesPerMember)
        #expect(ring.pointCount == 5 * 160)
        #expect(ring == (try CachetRing(members: given.reversed())))
        #expect(ring.index(of: "127.0.0.1:7420") == 2)
        #expect(ring.index(of: "127.0.0.1:7421") == nil)
        ring._checkInvariants()
    }

    @Test func buildingTwiceGivesTheSamePointsAndOwners() throws {
        let members = localMembers(7)
        let first = Self.ring(members)
        let second = Self.ring(members.shuffled())
        #expect(first == second && first.hashValue == second.hashValue)
        #expect(first._points.elementsEqual(second._points) { $0 == $1 })
        for key in Self.keys(1_000) {
            #expect(first.owner(of: key) == second.owner(of: key))
        }
        #expect(first != Self.ring(members, 159))
        #expect(first != Self.ring(localMembers(7, firstPort: 7421)))
    }

    @Test(arguments: [1, 2, 3, 160])
    func pointsAreWhereTheirNamesSay(virtualNodes: Int) {
        // Every point is XXH64("member#j") with j in decimal, in ascending order.
        let members = ["127.0.0.1:7420", "b", "ключ:1"]
        let ring = Self.ring(members, virtualNodes)
        let model = RingModel(members: members, virtualNodesPerMember: virtualNodes)
        #expect(ring._points.map(\.hash) == model.points.map(\.hash))
        #expect(ring._points.map { ring.members[$0.member] } == model.points.map(\.member))
        ring._checkInvariants()
    }

    @Test func pointNumbersAreDecimalWithoutPadding() {
        // Point 10 of "a" is at XXH64("a#10"); with 11 points it is there, with 10 it is not.
        let ten = RingModel.hash(Array("a#10".utf8))
        #expect(Self.ring(["a"], 11)._points.contains { $0.hash == ten })
        #expect(!Self.ring(["a"], 10)._points.contains { $0.hash == ten })
        let point1000 = RingModel.hash(Array("a#1000".utf8))
        #expect(Self.ring(["a"], 1001)._points.contains { $0.hash == point1000 })
    }

    // MARK: - Lookup

    @Test func ownersMatchTheModel() {
        let members = localMembers(10)
        let ring = Self.ring(members)
        let model = RingModel(members: members, virtualNodesPerMember: 160)
        for key in Self.keys(2_000) {
            #expect(ring.members[ring.owner(of: key)] == model.owner(of: key), "key \(key)")
        }
    }

    @Test func theOwnerIsTheFirstPointAtOrAfterTheHashAndWraps() {
        let ring = Self.ring(localMembers(3), 4)
        let points = ring._points
        for (index, point) in points.enumerated() {
            // Exactly on a point: that point's member. Just past it: the next point's, wrapping.
            #expect(ring.owner(ofHash: point.hash) == point.member)
            let next = points[(index + 1) % points.count]
            #expect(ring.owner(ofHash: point.hash &+ 1) == next.member)
            // Just before it, when that is past the previous point: also this point's member.
            if point.hash > 0 && (index == 0 || points[index - 1].hash < point.hash - 1) {
                #expect(ring.owner(ofHash: point.hash - 1) == point.member)
            }
        }
        // Below the first point and above the last both go to the first point.
        #expect(ring.owner(ofHash: 0) == points[0].member)
        #expect(ring.owner(ofHash: points[points.count - 1].hash + 1) == points[0].member)
        #expect(ring.owner(ofHash: UInt64.max) == points[0].member)
    }

    @Test func everyKeyFormGivesTheSameOwner() {
        let ring = Self.ring(localMembers(5))
        for text in ["k", "key:0000000042", "user:1001", "ключ", "キー🔑", String(repeating: "x", count: 300)] {
            let bytes = Array(text.utf8)
            let expected = bytes.withUnsafeBytes { ring.owner(of: $0) }
            #expect(ring.owner(of: text) == expected)
            #expect(ring.owner(of: bytes) == expected)
            #expect(ring.owner(of: bytes[...]) == expected)
            #expect(ring.owner(of: text.utf8.reversed().reversed()) == expected)
            #expect(ring.owner(ofHash: RingModel.hash(bytes)) == expected)
            #expect(ring.owner(of: Substring(text).utf8) == expected)
            #expect(
                ring.preferenceList(for: text, count: 2)
                    == bytes.withUnsafeBytes { ring.preferenceList(for: $0, count: 2) }
            )
            #expect(ring.preferenceList(for: bytes, count: 2).first == expected)
        }
    }

    @Test func aRingOfOneMemberOwnsEverything() {
        let ring = Self.ring(["127.0.0.1:7420"], 1)
        for key in Self.keys(100) {
            #expect(ring.owner(of: key) == 0)
            #expect(ring.preferenceList(for: key, count: 3) == [0])
        }
    }

    // MARK: - Preference lists

    @Test(arguments: [1, 2, 3, 10, 17, 40])
    func preferenceListsAreDistinctInRingOrderFromTheOwner(count: Int) {
        let members = localMembers(20)
        let ring = Self.ring(members, 20)
        let model = RingModel(members: members, virtualNodesPerMember: 20)
        for key in Self.keys(300) {
            let list = ring.preferenceList(for: key, count: count)
            #expect(list.count == min(count, members.count))
            #expect(Set(list).count == list.count, "duplicates in \(list)")
            #expect(list.first == ring.owner(of: key))
            #expect(list.map { ring.members[$0] } == model.preferenceList(for: key, count: count))
        }
    }

    @Test func preferenceListsOfNothing() {
        let ring = Self.ring(localMembers(3))
        #expect(ring.preferenceList(for: "k", count: 0) == [])
        #expect(ring.preferenceList(for: "k", count: -1) == [])
        #expect(Set(ring.preferenceList(for: "k", count: 1_000)) == [0, 1, 2])
    }

    @Test func theSecondChoiceIsWhereTheKeyGoesWhenTheOwnerLeaves() throws {
        let ring = Self.ring(localMembers(6))
        for key in Self.keys(500) {
            let list = ring.preferenceList(for: key, count: 2)
            let without = try ring.removing(ring.members[list[0]])
            #expect(without.members[without.owner(of: key)] == ring.members[list[1]])
        }
    }

    // MARK: - Adding and removing

    @Test func addingAndRemovingGiveTheRingBuiltFromScratch() throws {
        var random = SplitMix64(state: 7)
        var members = Set(localMembers(4))
        var ring = Self.ring(Array(members), 40)
        let candidates = localMembers(12, firstPort: 7418) + ["", "a", "z:1", "127.0.0.1:74200"]
        for _ in 0..<60 {
            let member = candidates.randomElement(using: &random)!
            if Bool.random(using: &random) {
                if member.isEmpty || members.contains(member) {
                    #expect(throws: CachetRingError.self) { try ring.adding(member) }
                    continue
                }
                ring = try ring.adding(member)
                members.insert(member)
            } else {
                if !members.contains(member) || members.count == 1 {
                    #expect(throws: CachetRingError.self) { try ring.removing(member) }
                    continue
                }
                ring = try ring.removing(member)
                members.remove(member)
            }
            ring._checkInvariants()
            let fresh = Self.ring(Array(members), 40)
            #expect(ring == fresh)
            #expect(ring._points.elementsEqual(fresh._points) { $0 == $1 }, "after changing \(member)")
        }
    }

    // MARK: - Errors

    @Test func badMemberListsAndCountsAreRejectedWithAMessageThatSaysWhatToDo() {
        func failure(_ body: () throws(CachetRingError) -> CachetRing) -> CachetRingError? {
            do {
                _ = try body()
                return nil
            } catch {
                return error
            }
        }
        let empty = failure { () throws(CachetRingError) in try CachetRing(members: []) }
        #expect(empty?.code == .noMembers)
        #expect(empty?.message.contains("127.0.0.1:7420") == true)

        let emptyName = failure { () throws(CachetRingError) in try CachetRing(members: ["a", ""]) }
        #expect(emptyName?.code == .emptyMemberName)
        #expect(emptyName?.message.contains("member 1 of 2") == true)

        let duplicate = failure { () throws(CachetRingError) in try CachetRing(members: ["b:1", "a:1", "b:1"]) }
        #expect(duplicate?.code == .duplicateMember)
        #expect(duplicate?.message == "member b:1 is named twice: list every node once")

        for count in [0, -1, 4097, Int.max] {
            let error = failure { () throws(CachetRingError) in
                try CachetRing(members: ["a"], virtualNodesPerMember: count)
            }
            #expect(error?.code == .virtualNodeCountOutOfRange)
            #expect(error?.message.hasPrefix("virtualNodesPerMember \(count) is outside 1...4096") == true)
        }
        #expect(
            failure { () throws(CachetRingError) in try CachetRing(members: ["a"], virtualNodesPerMember: 1) } == nil
        )
        #expect(
            failure { () throws(CachetRingError) in try CachetRing(members: ["a"], virtualNodesPerMember: 4096) } == nil
        )

        let ring = Self.ring(["a", "b"], 2)
        #expect(failure { () throws(CachetRingError) in try ring.adding("a") }?.code == .duplicateMember)
        #expect(failure { () throws(CachetRingError) in try ring.adding("") }?.code == .emptyMemberName)
        let unknown = failure { () throws(CachetRingError) in try ring.removing("c") }
        #expect(unknown?.code == .unknownMember)
        #expect(
            unknown?.description
                == "unknownMember: c is not a member (the ring has 2 members: a, b): remove only a current member"
        )
        let last = failure { () throws(CachetRingError) in try ring.removing("a").removing("b") }
        #expect(last?.code == .noMembers)
    }

    @Test func namesAreComparedByBytesNotCanonicalEquivalence() throws {
        // "é" precomposed and "e" + combining acute are equal Swift strings but different bytes, so
        // different points: they are two members, as any other implementation would see them.
        let composed = "caf\u{E9}:7420"
        let decomposed = "cafe\u{301}:7420"
        let ring = try CachetRing(members: [composed, decomposed], virtualNodesPerMember: 8)
        #expect(ring.members.count == 2)
        #expect(ring.index(of: composed) != ring.index(of: decomposed))
        #expect(try CachetRing(members: [composed]) != (try CachetRing(members: [decomposed])))
        ring._checkInvariants()
    }
}
