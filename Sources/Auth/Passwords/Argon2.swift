import CArgon2
import Foundation

/// Argon2id cost parameters. Defaults are OWASP's: m=19456 KiB, t=2, p=1.
public struct Argon2Parameters: Sendable, Equatable, CustomStringConvertible {
    public var memoryKiB: UInt32
    public var iterations: UInt32
    public var parallelism: UInt32

    public static let owasp = Argon2Parameters(memoryKiB: 19456, iterations: 2, parallelism: 1)

    public init(memoryKiB: UInt32, iterations: UInt32, parallelism: UInt32) {
        self.memoryKiB = memoryKiB
        self.iterations = iterations
        self.parallelism = parallelism
    }

    public var description: String { "m=\(memoryKiB),t=\(iterations),p=\(parallelism)" }
}

/// Argon2id through the reference implementation (libargon2), PHC-encoded.
public enum Argon2 {
    static let saltBytes = 16
    static let hashBytes = 32

    /// Hashes `password` with a fresh random salt. CPU- and memory-heavy: call through `PasswordHasher`.
    public static func hash(_ password: String, parameters: Argon2Parameters) throws(Argon2Error) -> String {
        let salt = SecureRandom.bytes(saltBytes)
        let length = argon2_encodedlen(
            parameters.iterations, parameters.memoryKiB, parameters.parallelism, UInt32(saltBytes), UInt32(hashBytes), Argon2_id)
        var encoded = [CChar](repeating: 0, count: length + 1)
        let bytes = Array(password.utf8)
        let result = argon2id_hash_encoded(
            parameters.iterations, parameters.memoryKiB, parameters.parallelism, bytes, bytes.count, salt, salt.count, hashBytes,
            &encoded, encoded.count)
        guard result == ARGON2_OK.rawValue else { throw Argon2Error(code: result) }
        return String(decoding: encoded.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// True when `password` matches the PHC string (constant-time comparison inside libargon2).
    public static func verify(_ password: String, encoded: String) -> Bool {
        let bytes = Array(password.utf8)
        return argon2id_verify(encoded, bytes, bytes.count) == ARGON2_OK.rawValue
    }

    /// The parameters a PHC string was made with, or nil if it is not an argon2id string.
    public static func parameters(of encoded: String) -> Argon2Parameters? {
        let parts = encoded.split(separator: "$")
        guard parts.count >= 4, parts[0] == "argon2id" else { return nil }
        var values: [Substring: UInt32] = [:]
        for pair in parts[2].split(separator: ",") {
            let kv = pair.split(separator: "=")
            if kv.count == 2, let v = UInt32(kv[1]) { values[kv[0]] = v }
        }
        guard let m = values["m"], let t = values["t"], let p = values["p"] else { return nil }
        return Argon2Parameters(memoryKiB: m, iterations: t, parallelism: p)
    }
}

public struct Argon2Error: Error, CustomStringConvertible {
    public let code: Int32
    public var description: String { "argon2 error \(code): \(String(cString: argon2_error_message(code)))" }
}

/// Cryptographically secure random bytes.
public enum SecureRandom {
    public static func bytes(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }
}
