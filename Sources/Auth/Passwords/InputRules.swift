import Foundation

/// Validation of what users type, shared by every flow. Lengths people see are counted in characters (grapheme clusters);
/// every string also has a byte limit, since one character can carry any number of combining marks.
public enum InputRules {
    public static let emailBytesMax = 254
    public static let passwordCharactersMin = 10
    public static let passwordCharactersMax = 128
    public static let passwordBytesMax = 1024
    public static let nameCharactersMax = 100
    public static let nameBytesMax = 400

    /// Trimmed, lower-cased and in Unicode's composed form (NFC); nil unless it looks like one deliverable address.
    /// One mailbox has one spelling: `böb` typed composed or decomposed is one address (an outside tester verified both
    /// as two accounts), compatibility forms such as full-width letters are refused rather than guessed at, and the
    /// domain is ASCII (an internationalized domain in its `xn--` form), so `exämple.com` and `xn--exmple-cua.com` cannot
    /// become two accounts.
    public static func normalizedEmail(_ raw: String) -> String? {
        guard raw.utf8.count <= 4 * emailBytesMax else { return nil }
        let email = raw.trimmingCharacters(in: .whitespacesAndNewlines).lowercased().precomposedStringWithCanonicalMapping
        guard email.utf8.count <= emailBytesMax, !email.contains(where: { $0.isWhitespace || $0.isNewline }) else { return nil }
        guard email.precomposedStringWithCompatibilityMapping == email else { return nil }
        let parts = email.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, let local = parts.first, let domain = parts.last else { return nil }
        guard (1...64).contains(local.utf8.count), !local.hasPrefix("."), !local.hasSuffix("."), !local.contains("..") else { return nil }
        let labels = domain.split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 2, labels.allSatisfy({ (1...63).contains($0.count) && !$0.hasPrefix("-") && !$0.hasSuffix("-") }) else { return nil }
        let allowedDomain = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyz0123456789-.")
        guard domain.unicodeScalars.allSatisfy(allowedDomain.contains) else { return nil }
        let allowedLocal = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "!#$%&'*+/=?^_`{|}~.-"))
        return local.unicodeScalars.allSatisfy(allowedLocal.contains) ? email : nil
    }

    /// 10–128 characters and at most 1 KiB, any characters, not one of the common passwords.
    public static func passwordProblem(_ password: String) -> String? {
        if password.utf8.count > passwordBytesMax { return "Password must be at most \(passwordBytesMax) bytes." }
        let count = password.count
        if count < passwordCharactersMin { return "Password must be at least \(passwordCharactersMin) characters." }
        if count > passwordCharactersMax { return "Password must be at most \(passwordCharactersMax) characters." }
        if CommonPasswords.list.contains(password.lowercased()) { return "This password is too common; choose another." }
        return nil
    }

    /// A display name: 1–100 characters (at most 400 bytes) after trimming, no control characters.
    public static func nameProblem(_ name: String) -> String? {
        textProblem(name, field: "Name", charactersMax: nameCharactersMax, bytesMax: nameBytesMax)
    }

    /// The problem with a required one-line text field, or nil: empty after trimming, too many characters or bytes,
    /// or control characters.
    public static func textProblem(_ text: String, field: String, charactersMax: Int, bytesMax: Int) -> String? {
        if text.utf8.count > bytesMax + 64 { return "\(field) must be at most \(bytesMax) bytes." }
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.isEmpty { return "\(field) must not be empty." }
        if trimmed.utf8.count > bytesMax { return "\(field) must be at most \(bytesMax) bytes." }
        if trimmed.count > charactersMax { return "\(field) must be at most \(charactersMax) characters." }
        if trimmed.unicodeScalars.contains(where: { CharacterSet.controlCharacters.contains($0) }) {
            return "\(field) must not contain control characters."
        }
        return nil
    }

    /// `text` cut to at most `bytes` UTF-8 bytes, on a character boundary.
    public static func truncated(_ text: String, bytes: Int) -> String {
        guard text.utf8.count > bytes else { return text }
        var result = ""
        var used = 0
        for character in text {
            let size = character.utf8.count
            guard used + size <= bytes else { break }
            result.append(character)
            used += size
        }
        return result
    }
}
