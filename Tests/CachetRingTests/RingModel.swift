import CachetRing

/// The ring as `Protocol/RING.md` states it, written as plainly as possible and independently of
/// `CachetRing`'s building and merging: name every point with string interpolation, sort by hash then
/// member bytes, scan for the first point at or after the key's hash.
struct RingModel {
    let members: [String]
    let points: [(hash: UInt64, member: String)]

    init(members: [String], virtualNodesPerMember: Int) {
        self.members = members.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
        var points: [(hash: UInt64, member: String, number: Int)] = []
        for member in members {
            for number in 0..<virtualNodesPerMember {
                points.append((RingModel.hash(Array("\(member)#\(number)".utf8)), member, number))
            }
        }
        points.sort {
            if $0.hash != $1.hash { return $0.hash < $1.hash }
            if $0.member != $1.member { return Array($0.member.utf8).lexicographicallyPrecedes(Array($1.member.utf8)) }
            return $0.number < $1.number
        }
        self.points = points.map { ($0.hash, $0.member) }
    }

    static func hash(_ bytes: [UInt8]) -> UInt64 {
        bytes.withUnsafeBytes { CachetRing.hash($0) }
    }

    func firstPoint(atOrAfter hash: UInt64) -> Int {
        points.firstIndex { $0.hash >= hash } ?? 0
    }

    func owner(of key: [UInt8]) -> String {
        points[firstPoint(atOrAfter: RingModel.hash(key))].member
    }

    func preferenceList(for key: [UInt8], count: Int) -> [String] {
        var result: [String] = []
        var point = firstPoint(atOrAfter: RingModel.hash(key))
        for _ in points.indices where result.count < count {
            if !result.contains(points[point].member) { result.append(points[point].member) }
            point = (point + 1) % points.count
        }
        return result
    }
}

/// `count` members named like local nodes: `127.0.0.1:7420`, `127.0.0.1:7421`, ...
func localMembers(_ count: Int, firstPort: Int = 7420) -> [String] {
    (0..<count).map { "127.0.0.1:\(firstPort + $0)" }
}
