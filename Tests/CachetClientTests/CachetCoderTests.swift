import CachetClient
import Foundation
import Testing

/// The coders on their own: every shape Codable has, values that change shape between versions, and
/// bytes that are not a value, which must fail with an error, never a crash.
@Suite("CachetClient: coders")
struct CachetCoderTests {
    enum Kind: String, Codable, Equatable { case admin, reader }

    struct Everything: Codable, Equatable {
        struct Inner: Codable, Equatable {
            var label: String
            var weights: [Double]
        }

        var int: Int
        var int8: Int8
        var int16: Int16
        var int32: Int32
        var int64: Int64
        var uint: UInt
        var uint8: UInt8
        var uint16: UInt16
        var uint32: UInt32
        var uint64: UInt64
        var float: Float
        var double: Double
        var bool: Bool
        var text: String
        var empty: String
        var bytes: [UInt8]
        var data: Data
        var date: Date
        var kind: Kind
        var optionalPresent: Int?
        var optionalAbsent: String?
        var optionals: [Int?]
        var nested: Inner
        var nestedArray: [Inner]
        var matrix: [[Int]]
        var byName: [String: Int]
        var byNumber: [Int: String]
        var set: Set<String>
    }

    static let everything = Everything(
        int: -42,
        int8: -128,
        int16: 32_000,
        int32: -2_000_000_000,
        int64: .min,
        uint: 7,
        uint8: 255,
        uint16: 65_535,
        uint32: 4_000_000_000,
        uint64: .max,
        float: 1.5,
        double: -0.000_123,
        bool: true,
        text: "héllo, wörld ✓",
        empty: "",
        bytes: [0, 1, 255],
        data: Data([9, 8, 7]),
        date: Date(timeIntervalSince1970: 1_764_000_000.25),
        kind: .reader,
        optionalPresent: 0,
        optionalAbsent: nil,
        optionals: [1, nil, 3],
        nested: .init(label: "n", weights: [0.5, 2]),
        nestedArray: [.init(label: "a", weights: []), .init(label: "b", weights: [1])],
        matrix: [[1, 2], [], [3]],
        byName: ["x": 1, "y": 2],
        byNumber: [1: "one", 2: "two"],
        set: ["s", "t"]
    )

    static let coders: [any CachetCoder] = [CachetJSONCoder(), CachetBinaryCoder()]

    @Test(arguments: [0, 1])
    func everyShapeRoundTrips(coder index: Int) throws {
        let coder = Self.coders[index]
        let bytes = try coder.encode(Self.everything)
        #expect(try coder.decode(Everything.self, from: bytes) == Self.everything)
        // Top-level values of every kind, not only structs.
        #expect(try coder.decode(Int.self, from: try coder.encode(-5)) == -5)
        #expect(try coder.decode(String.self, from: try coder.encode("only")) == "only")
        #expect(try coder.decode([String].self, from: try coder.encode(["a", "b"])) == ["a", "b"])
        #expect(try coder.decode(Int?.self, from: try coder.encode(Int?.none)) == nil)
        #expect(try coder.decode(Kind.self, from: try coder.encode(Kind.admin)) == .admin)
    }

    struct Version1: Codable { var id: Int; var name: String }
    struct Version2: Codable, Equatable { var id: Int; var name: String; var email: String? }
    struct Reordered: Codable, Equatable {
        var name: String
        var id: Int

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            // Read in the other order than written.
            id = try container.decode(Int.self, forKey: .id)
            name = try container.decode(String.self, forKey: .name)
        }
    }

    @Test func theBinaryCoderReadsValuesWrittenBeforeATypeGrewAndInAnyOrder() throws {
        let coder = CachetBinaryCoder()
        let old = try coder.encode(Version1(id: 1, name: "a"))
        #expect(try coder.decode(Version2.self, from: old) == Version2(id: 1, name: "a", email: nil))
        #expect(try coder.decode(Reordered.self, from: old).id == 1)
        #expect(old.count <= (try CachetJSONCoder().encode(Version1(id: 1, name: "a"))).count)
    }

    @Test(arguments: [0, 1])
    func bytesThatAreNotTheTypeFailWithAnError(coder index: Int) throws {
        let coder = Self.coders[index]
        let bytes = try coder.encode(Self.everything)
        #expect(throws: (any Error).self) {
            try coder.decode(Version1.self, from: try coder.encode(["not", "a", "struct"]))
        }
        #expect(throws: (any Error).self) { try coder.decode(Everything.self, from: Array(bytes.dropLast(3))) }
        #expect(throws: (any Error).self) { try coder.decode(Everything.self, from: []) }
        // Every truncation and a sweep of single-byte corruptions of a real value: errors or other values,
        // never a crash.
        for length in stride(from: 0, to: bytes.count, by: 7) {
            _ = try? coder.decode(Everything.self, from: Array(bytes.prefix(length)))
        }
        for position in stride(from: 0, to: bytes.count, by: 3) {
            var corrupted = bytes
            corrupted[position] ^= 0xa5
            _ = try? coder.decode(Everything.self, from: corrupted)
        }
    }

    @Test func aKeyedDecodingErrorNamesThePath() throws {
        let coder = CachetBinaryCoder()
        let bytes = try coder.encode(Version1(id: 1, name: "a"))
        struct WrongType: Codable { var id: String }
        do {
            _ = try coder.decode(WrongType.self, from: bytes)
            Issue.record("an Int decoded as a String")
        } catch let DecodingError.typeMismatch(_, context), let DecodingError.dataCorrupted(context) {
            #expect(context.codingPath.map(\.stringValue) == ["id"], "\(context)")
        }
    }

    /// A list written and read through Codable's unkeyed containers, as any type of its own would be.
    struct ListThroughContainers<Element: Codable & Equatable>: Codable, Equatable {
        var elements: [Element]

        init(_ elements: [Element]) { self.elements = elements }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.unkeyedContainer()
            for element in elements { try container.encode(element) }
        }

        init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            elements = []
            while !container.isAtEnd { elements.append(try container.decode(Element.self)) }
        }
    }

    /// A dictionary written and read through Codable's keyed containers, entries in the dictionary's order.
    struct MapThroughContainers<Value: Codable & Equatable>: Codable, Equatable {
        struct Key: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        var entries: [String: Value]

        init(_ entries: [String: Value]) { self.entries = entries }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Key.self)
            for (key, value) in entries { try container.encode(value, forKey: Key(stringValue: key)) }
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: Key.self)
            entries = [:]
            for key in container.allKeys { entries[key.stringValue] = try container.decode(Value.self, forKey: key) }
        }
    }

    /// Arrays, sets and dictionaries keyed by strings are read by the binary coder's own path, which must
    /// read what their `Codable` conformances write through its containers (and write the same bytes as a
    /// type of one's own writes through them, so that either reads the other's).
    @Test func collectionsAreTheBytesTheirContainersWrite() throws {
        let coder = CachetBinaryCoder()
        func same<Element: Codable & Equatable>(_ elements: [Element]) throws {
            let fast = try coder.encode(elements)
            let general = try coder.encode(ListThroughContainers(elements))
            #expect(fast == general, "\(elements)")
            #expect(try coder.decode([Element].self, from: general) == elements)
            #expect(try coder.decode(ListThroughContainers<Element>.self, from: fast).elements == elements)
        }
        try same([String]())
        try same(["a", "", "héllo ✓"])
        try same([1, -1, .max, .min])
        try same([1, nil, 3] as [Int?])
        try same([[1, 2], [], [3]])
        try same([Everything.Inner(label: "a", weights: [1]), .init(label: "b", weights: [])])
        try same([["x": 1], [:]])
        try same([Self.everything])

        func same<Value: Codable & Equatable>(_ entries: [String: Value]) throws {
            let fast = try coder.encode(entries)
            let general = try coder.encode(MapThroughContainers(entries))
            #expect(fast == general, "\(entries)")
            #expect(try coder.decode([String: Value].self, from: general) == entries)
            #expect(try coder.decode(MapThroughContainers<Value>.self, from: fast).entries == entries)
        }
        try same([String: Int]())
        try same(["theme": 2, "pageSize": 50, "digest": 1])
        try same(["a": "x", "b": ""])
        try same(["a": nil, "b": 2] as [String: Int?])
        try same(["list": [1, 2], "none": []])
        try same(["inner": Everything.Inner(label: "l", weights: [0.5])])
        try same(["deep": ["deeper": ["x": 1]]])

        let set: Set<String> = ["s", "t", "u"]
        #expect(try coder.encode(set) == coder.encode(ListThroughContainers(Array(set))))
        #expect(try coder.decode(Set<String>.self, from: coder.encode(ListThroughContainers(Array(set)))) == set)
    }

    /// The collections' own path fails as the containers do: with an error naming the place, never a crash.
    @Test func collectionsThatAreNotTheTypeFailWithAnError() throws {
        let coder = CachetBinaryCoder()
        #expect(throws: DecodingError.self) { try coder.decode([Int].self, from: coder.encode([1, nil, 3] as [Int?])) }
        #expect(throws: DecodingError.self) { try coder.decode([String: Int].self, from: coder.encode([1, 2])) }
        #expect(throws: DecodingError.self) { try coder.decode([Int].self, from: coder.encode(["x": 1])) }
        #expect(throws: DecodingError.self) { try coder.decode([String: Int].self, from: coder.encode(Int?.none)) }
        do {
            _ = try coder.decode([String: [String: Int]].self, from: coder.encode(["outer": ["inner": "text"]]))
            Issue.record("a String decoded as an Int")
        } catch let DecodingError.typeMismatch(_, context) {
            #expect(context.codingPath.map(\.stringValue) == ["outer", "inner"], "\(context)")
        }
        do {
            _ = try coder.encode(["ok": 1, "": 2])
            Issue.record("an empty key was written")
        } catch let EncodingError.invalidValue(_, context) {
            #expect(context.codingPath.map(\.stringValue) == [""], "\(context)")
        }
        let bytes = try coder.encode(["a": [1, 2], "b": [3]])
        for length in 0..<bytes.count { _ = try? coder.decode([String: [Int]].self, from: Array(bytes.prefix(length))) }
        for position in bytes.indices {
            var corrupted = bytes
            corrupted[position] ^= 0x5a
            _ = try? coder.decode([String: [Int]].self, from: corrupted)
        }
    }
}
