import Foundation

/// Validation of what users type, shared by every flow.
public enum InputRules {
    /// Trimmed and lower-cased; nil unless it looks like one deliverable address.
    public static func normalizedEmail(_ raw: String) -> String? {
        let email = raw.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
        guard email.utf8.count <= 254, !email.contains(where: { $0.isWhitespace || $0.isNewline }) else { return nil }
        let parts = email.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, let local = parts.first, let domain = parts.last else { return nil }
        guard (1...64).contains(local.utf8.count), !local.hasPrefix("."), !local.hasSuffix("."), !local.contains("..") else { return nil }
        let labels = domain.split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 2, labels.allSatisfy({ (1...63).contains($0.count) && !$0.hasPrefix("-") && !$0.hasSuffix("-") }) else { return nil }
        let allowedDomain = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-."))
        guard domain.unicodeScalars.allSatisfy(allowedDomain.contains) else { return nil }
        let allowedLocal = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "!#$%&'*+/=?^_`{|}~.-"))
        return local.unicodeScalars.allSatisfy(allowedLocal.contains) ? email : nil
    }

    /// 10–128 characters, any characters, not one of the common passwords.
    public static func passwordProblem(_ password: String) -> String? {
        let count = password.count
        if count < 10 { return "Password must be at least 10 characters." }
        if count > 128 { return "Password must be at most 128 characters." }
        if CommonPasswords.list.contains(password.lowercased()) { return "This password is too common; choose another." }
        return nil
    }

    /// A display name: 1–100 characters after trimming, no control characters.
    public static func nameProblem(_ name: String) -> String? {
        let trimmed = name.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.isEmpty { return "Name must not be empty." }
        if trimmed.count > 100 { return "Name must be at most 100 characters." }
        if trimmed.unicodeScalars.contains(where: { CharacterSet.controlCharacters.contains($0) }) { return "Name must not contain control characters." }
        return nil
    }
}
