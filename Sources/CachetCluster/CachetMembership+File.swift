import CachetRing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension CachetMembership {
    /// The largest cluster file read: far beyond any real cluster, small enough to refuse a wrong path.
    public static let maximumFileSize = 4 << 20

    /// Reads and checks a cluster file (format in `Protocol/CLUSTER.md`).
    /// - Parameter path: the file's path.
    /// - Throws: ``CachetClusterError`` whose message starts with the path: `unreadableFile` when the file
    ///   cannot be read or is over ``maximumFileSize``, and every error of ``init(json:)``.
    public init(contentsOfFile path: String) throws(CachetClusterError) {
        let bytes = try Self.readFile(path)
        try self.init(json: bytes, context: MembershipContext(file: path, what: "cluster file \(path)", lines: nil))
    }

    /// Decodes and checks the bytes of a cluster file (format in `Protocol/CLUSTER.md`).
    /// - Parameter json: UTF-8 JSON: an object with `members` (a list of `{"id", "host", "port"}`, `id`
    ///   optional) and optionally `virtual_nodes_per_member`.
    /// - Throws: ``CachetClusterError``: `invalidJSON` with the line and column of a syntax error;
    ///   `wrongType`, `missingField` or `unknownField` for a document that is JSON but not a cluster file;
    ///   and every error of ``init(members:virtualNodesPerMember:)``.
    public init(json: [UInt8]) throws(CachetClusterError) {
        try self.init(json: json, context: MembershipContext(file: nil, what: "cluster file", lines: nil))
    }

    init(json bytes: [UInt8], context: MembershipContext) throws(CachetClusterError) {
        var context = context
        func position(_ offset: Int) -> String {
            let (line, column) = ClusterJSON.lineAndColumn(of: offset, in: bytes)
            return "line \(line), column \(column)"
        }
        let document: ClusterJSON
        do {
            document = try ClusterJSON.parse(bytes)
        } catch {
            throw context.error(
                .invalidJSON,
                "not valid JSON at \(position(error.offset)): \(error.reason); "
                    + "the file must be one JSON object, see Protocol/CLUSTER.md"
            )
        }
        guard case .object(let fields) = document.value else {
            throw context.error(
                .wrongType,
                "the file holds \(document.typeName), not an object: write {\"members\": [...]}, "
                    + "see Protocol/CLUSTER.md"
            )
        }
        var membersValue: ClusterJSON?
        var virtualNodes = CachetRing.defaultVirtualNodesPerMember
        for (key, value) in fields {
            switch key {
            case "members":
                membersValue = value
            case "virtual_nodes_per_member":
                guard case .integer(let count) = value.value else {
                    throw context.error(
                        .wrongType,
                        "\"virtual_nodes_per_member\" at \(position(value.offset)) is \(value.typeName), "
                            + "not an integer: give a whole number such as 160, or leave it out"
                    )
                }
                virtualNodes = count
            default:
                throw context.error(
                    .unknownField,
                    "unknown field \(String(reflecting: key)) at \(position(value.offset)): "
                        + "the fields are \"members\" and \"virtual_nodes_per_member\""
                )
            }
        }
        guard let membersValue else {
            throw context.error(
                .missingField,
                "no \"members\": list every node, such as {\"members\": [{\"id\": \"n1\", \"host\": \"127.0.0.1\", "
                    + "\"port\": 7420}]}"
            )
        }
        guard case .array(let elements) = membersValue.value else {
            throw context.error(
                .wrongType,
                "\"members\" at \(position(membersValue.offset)) is \(membersValue.typeName), not a list"
            )
        }
        var members: [CachetClusterMember] = []
        var lines: [Int] = []
        for (index, element) in elements.enumerated() {
            let line = ClusterJSON.lineAndColumn(of: element.offset, in: bytes).line
            let label = "members[\(index)] (line \(line))"
            let fields: ClusterMemberFields
            do throws(ClusterMemberFields.Problem) {
                fields = try ClusterMemberFields(element, strict: true)
            } catch {
                switch error {
                case .notAnObject(let typeName):
                    throw context.error(
                        .wrongType,
                        "\(label) is \(typeName), not an object such as "
                            + "{\"id\": \"n1\", \"host\": \"127.0.0.1\", \"port\": 7420}",
                        member: index
                    )
                case .wrongType(let key, let typeName) where key == "port":
                    throw context.error(
                        .wrongType,
                        "\(label): \"port\" is \(typeName), not an integer: give a whole number such as 7420",
                        member: index
                    )
                case .wrongType(let key, let typeName):
                    throw context.error(.wrongType, "\(label): \"\(key)\" is \(typeName), not a string", member: index)
                case .unknownField(let key, let offset):
                    throw context.error(
                        .unknownField,
                        "\(label): unknown field \(String(reflecting: key)) at \(position(offset)): "
                            + "a member has \"id\" (optional), \"host\" and \"port\"",
                        member: index
                    )
                }
            }
            guard let host = fields.host else {
                throw context.error(
                    .missingField,
                    "\(label): no \"host\": give the IPv4 address or DNS name the node is reached at",
                    member: index
                )
            }
            guard let port = fields.port else {
                throw context.error(
                    .missingField,
                    "\(label): no \"port\": give the TCP port the node listens on",
                    member: index
                )
            }
            members.append(CachetClusterMember(id: fields.id, host: host, port: port))
            lines.append(line)
        }
        context.lines = lines
        try self.init(checking: members, virtualNodesPerMember: virtualNodes, context: context)
    }

    /// The whole file, or an `unreadableFile` error naming it and the system's reason.
    static func readFile(_ path: String) throws(CachetClusterError) -> [UInt8] {
        func failure(_ reason: String) -> CachetClusterError {
            CachetClusterError(
                code: .unreadableFile,
                message: "cannot read cluster file \(path): \(reason)",
                file: path
            )
        }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw failure(String(cString: strerror(errno))) }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw failure(String(cString: strerror(errno)))
            }
            if count == 0 { return bytes }
            bytes += chunk[0..<count]
            if bytes.count > maximumFileSize {
                throw failure("it is larger than \(maximumFileSize) bytes; is it the right file?")
            }
        }
    }
}
