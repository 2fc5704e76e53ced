import COpenSSLCrypto
import Foundation

/// An error reading an auth file or a secret hash: what is wrong, and where.
public struct CachetAuthError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of error this is.
    public enum Code: String, Sendable, Hashable {
        /// The file cannot be read, or is not the JSON object the format asks for.
        case unreadable
        /// A user entry is incomplete or contradicts another (a missing field, a name twice, an unknown role).
        case invalidUser
        /// A secret hash is not `sha256$SALT$DIGEST` in hexadecimal.
        case invalidHash
    }

    /// What kind of error this is.
    public var code: Code
    /// What is wrong, naming the file and the user where there is one.
    public var message: String

    /// An error of `code` saying `message`.
    public init(code: Code, message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}

/// A secret stored as a salted hash: `sha256$SALT$DIGEST`, SALT 16 random bytes and DIGEST the SHA-256 of
/// SALT followed by the secret, both in lowercase hexadecimal (``init(hashing:)`` makes one). Like
/// Redis's ACL passwords, the hash is fast: secrets are long random tokens, not words a person chose, and
/// a failed attempt is limited per address (``CachetAuthFailureLimiter``).
public struct CachetSecretHash: Sendable, Hashable, CustomStringConvertible {
    /// The salt.
    public let salt: [UInt8]
    /// SHA-256 of the salt followed by the secret.
    public let digest: [UInt8]

    /// Parses `sha256$SALT$DIGEST`.
    /// - Parameter text: the stored form.
    /// - Throws: ``CachetAuthError`` `invalidHash` saying what is wrong.
    public init(parsing text: String) throws(CachetAuthError) {
        let parts = text.split(separator: "$", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == "sha256" else {
            throw CachetAuthError(code: .invalidHash, message: "a secret is stored as sha256$SALT$DIGEST")
        }
        guard let salt = Self.bytes(hex: parts[1]), salt.count >= 8,
            let digest = Self.bytes(hex: parts[2]), digest.count == 32
        else {
            throw CachetAuthError(
                code: .invalidHash,
                message: "sha256$SALT$DIGEST needs a salt of at least 8 bytes and a digest of 32, in hexadecimal"
            )
        }
        self.salt = salt
        self.digest = digest
    }

    /// The hash of `secret` under a new random salt of 16 bytes.
    /// - Parameter secret: the secret.
    public init(hashing secret: [UInt8]) {
        var salt = [UInt8](repeating: 0, count: 16)
        let made = salt.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32($0.count)) }
        precondition(made == 1, "the system's random source failed")
        self.salt = salt
        self.digest = Self.sha256(salt + secret)
    }

    /// Whether `secret` is the one hashed, compared in constant time.
    /// - Parameter secret: the secret offered.
    public func matches(_ secret: [UInt8]) -> Bool {
        let offered = Self.sha256(salt + secret)
        return offered.withUnsafeBytes { offered in
            digest.withUnsafeBytes { stored in CRYPTO_memcmp(offered.baseAddress, stored.baseAddress, 32) == 0 }
        }
    }

    /// The stored form, `sha256$SALT$DIGEST`.
    public var description: String { "sha256$\(Self.hex(salt))$\(Self.hex(digest))" }

    static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        bytes.withUnsafeBufferPointer { input in
            digest.withUnsafeMutableBufferPointer { output in
                _ = SHA256(input.baseAddress, input.count, output.baseAddress)
            }
        }
        return digest
    }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    static func bytes(hex: Substring) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        func value(_ digit: UInt8) -> UInt8? {
            switch digit {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return digit - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return digit - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): return digit - UInt8(ascii: "A") + 10
            default: return nil
            }
        }
        var bytes: [UInt8] = []
        var index = 0
        while index < digits.count {
            guard let high = value(digits[index]), let low = value(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }
}

/// The users of an auth file (`--auth-file`, `docs/security.md`): who may authenticate, and what each
/// may do.
///
/// ```json
/// {"users": [
///   {"name": "shop", "secret": "sha256$…$…", "role": "write", "prefixes": ["shop:"]},
///   {"name": "ops", "secret": "sha256$…$…", "role": "admin"}
/// ]}
/// ```
///
/// Each user has a secret (as a ``CachetSecretHash``), a ``CachetRole`` and, optionally, the key prefixes
/// it may touch. Immutable once read: a node that re-reads the file (SIGHUP) makes a new table.
public struct CachetAuthTable: Sendable {
    private struct User: Sendable {
        let hash: CachetSecretHash
        let principal: CachetPrincipal
    }

    private let users: [String: User]

    /// The users' names, sorted.
    public var userNames: [String] { users.keys.sorted() }

    /// Reads an auth file.
    /// - Parameter path: the file.
    /// - Throws: ``CachetAuthError`` naming the file, and the user at fault.
    public init(contentsOfFile path: String) throws(CachetAuthError) {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw CachetAuthError(
                code: .unreadable,
                message: "cannot read the auth file \(path): \(error.localizedDescription)"
            )
        }
        do {
            try self.init(json: Array(data))
        } catch {
            throw CachetAuthError(code: error.code, message: "auth file \(path): \(error.message)")
        }
    }

    /// Parses an auth file's contents.
    /// - Parameter json: the file's bytes.
    /// - Throws: ``CachetAuthError`` naming the user at fault.
    public init(json: [UInt8]) throws(CachetAuthError) {
        struct File: Decodable {
            struct Entry: Decodable {
                var name: String?
                var secret: String?
                var role: String?
                var prefixes: [String]?
            }
            var users: [Entry]
        }
        let file: File
        do {
            file = try JSONDecoder().decode(File.self, from: Data(json))
        } catch {
            throw CachetAuthError(
                code: .unreadable,
                message: "not an object {\"users\": [{\"name\": …, \"secret\": …, \"role\": …}]}: \(error)"
            )
        }
        var users: [String: User] = [:]
        for (index, entry) in file.users.enumerated() {
            guard let name = entry.name, !name.isEmpty, name.utf8.count <= 255 else {
                throw CachetAuthError(code: .invalidUser, message: "users[\(index)] needs a \"name\" of 1 to 255 bytes")
            }
            guard let secret = entry.secret else {
                throw CachetAuthError(code: .invalidUser, message: "user \(name) has no \"secret\"")
            }
            let hash: CachetSecretHash
            do {
                hash = try CachetSecretHash(parsing: secret)
            } catch {
                throw CachetAuthError(code: .invalidHash, message: "user \(name): \(error.message)")
            }
            guard let roleName = entry.role, let role = CachetRole(rawValue: roleName) else {
                throw CachetAuthError(
                    code: .invalidUser,
                    message: "user \(name) needs a \"role\": read, write, admin or peer"
                )
            }
            let prefixes = entry.prefixes ?? []
            if prefixes.contains(where: \.isEmpty) {
                throw CachetAuthError(
                    code: .invalidUser,
                    message: "user \(name) has an empty prefix (leave out \"prefixes\" for every key)"
                )
            }
            guard users[name] == nil else {
                throw CachetAuthError(code: .invalidUser, message: "user \(name) is listed twice")
            }
            users[name] = User(
                hash: hash,
                principal: CachetPrincipal(name: name, role: role, prefixes: prefixes.map { Array($0.utf8) })
            )
        }
        self.users = users
    }

    /// The user `name` if `secret` is its secret; nil otherwise (an unknown user costs the same hash as a
    /// known one, so that the answer's time does not tell which names exist).
    /// - Parameters:
    ///   - name: the user's name.
    ///   - secret: the secret offered.
    public func authenticate(user name: String, secret: [UInt8]) -> CachetPrincipal? {
        guard let user = users[name] else {
            _ = Self.decoy.matches(secret)
            return nil
        }
        return user.hash.matches(secret) ? user.principal : nil
    }

    private static let decoy = CachetSecretHash(hashing: [])
}

/// Where a tool reads a secret from: never its command line (which `ps` shows), but a file's first line or
/// an environment variable.
public enum CachetSecretSource {
    /// The secret in the first line of `file` when one is given, else in the environment variable
    /// `variable`; nil when neither is there.
    /// - Parameters:
    ///   - file: a file whose first line is the secret.
    ///   - variable: the environment variable to read otherwise.
    /// - Throws: ``CachetAuthError`` `unreadable` when `file` cannot be read.
    public static func read(file: String?, environmentVariable variable: String) throws(CachetAuthError) -> [UInt8]? {
        if let file {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                throw CachetAuthError(code: .unreadable, message: "the secret file \(file) cannot be read")
            }
            return Array((text.split(separator: "\n", omittingEmptySubsequences: false).first ?? "").utf8)
        }
        return ProcessInfo.processInfo.environment[variable].map { Array($0.utf8) }
    }
}
