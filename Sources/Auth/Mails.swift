import Clock
import Foundation
import Mail
import Storage

/// The texts of the messages the auth flows send. Codes are marked as secrets so log transports redact them.
enum Mails {
    /// The code of one sign-up request; it says when that sign-up started, so the owner of the mailbox can tell their own
    /// sign-up from one somebody else started with this address (whose password the code would activate).
    static func verificationCode(to email: String, code: MailedCode, minutes: Int, requestedAt: Date) -> MailMessage {
        let started = ISOTime.string(requestedAt).prefix(19).replacingOccurrences(of: "T", with: " ")
        return MailMessage(
            to: email, kind: "verification-code", subject: "Your verification code",
            body:
                "Your verification code is \(code.short).\n\nIt finishes the sign-up started at \(started) UTC with the password typed then; it expires in \(minutes) minutes and works once. If you did not sign up at that time, ignore this message: nobody can use your address without this code."
                + longCodeNote(code),
            secrets: [code.short, code.long])
    }

    static func resetCode(to email: String, code: MailedCode, minutes: Int) -> MailMessage {
        MailMessage(
            to: email, kind: "reset-code", subject: "Your password reset code",
            body:
                "Your password reset code is \(code.short).\n\nIt expires in \(minutes) minutes. If you did not ask to reset your password, ignore this message; your password has not changed."
                + longCodeNote(code),
            secrets: [code.short, code.long])
    }

    /// The long code (``MailedCode``): it works where the six digits do, and still works when someone else has used up
    /// the six digits' tries.
    static func longCodeNote(_ code: MailedCode) -> String {
        "\n\nIf someone else's wrong guesses have used up those six digits, enter this long code instead (it works the same way, once, within the same time): \(code.long)"
    }

    static func existingAccount(to email: String) -> MailMessage {
        MailMessage(
            to: email, kind: "existing-account", subject: "Someone tried to sign up with your address",
            body:
                "Someone tried to create an account with this email address, which already has one.\n\nIf it was you, sign in, or reset your password if you forgot it. Otherwise you can ignore this message."
        )
    }

    static func appleLinked(to email: String) -> MailMessage {
        MailMessage(
            to: email, kind: "apple-linked", subject: "Sign in with Apple was added to your account",
            body:
                "Your account can now also be opened with Sign in with Apple (the Apple ID confirmed this email address).\n\nIf this was not you, reset your password and contact support."
        )
    }

    static func passkeyAdded(to email: String, client: ClientInfo, at: Date) -> MailMessage {
        MailMessage(
            to: email, kind: "passkey-added", subject: "A passkey was added to your account",
            body:
                "A passkey was added to your account from \(InputRules.truncated(client.userAgent ?? "unknown app", bytes: 120)) at \(ISO8601DateFormatter().string(from: at)). It opens the account with no password or code.\n\nIf this was not you, remove it under your account's sign-in methods, change your password and contact support."
        )
    }

    static func emailChangeCode(to email: String, code: String, minutes: Int) -> MailMessage {
        MailMessage(
            to: email, kind: "email-change-code", subject: "Your code to use this address",
            body:
                "Your code is \(code). It confirms this address as your account's new email and expires in \(minutes) minutes.\n\nIf you did not ask for this, ignore this message."
        )
    }

    static func emailChangeRequested(to email: String) -> MailMessage {
        MailMessage(
            to: email, kind: "email-change-requested", subject: "A change of your account's email was requested",
            body: "Someone signed in to your account asked to move it to another email address.\n\nIf this was not you, change your password now."
        )
    }

    static func emailChanged(to email: String, newEmail: String) -> MailMessage {
        MailMessage(
            to: email, kind: "email-changed", subject: "Your account's email was changed",
            body: "Your account now uses \(newEmail) and other sessions were signed out.\n\nIf this was not you, contact support at once."
        )
    }

    static func twoFactorEnabled(to email: String) -> MailMessage {
        MailMessage(
            to: email, kind: "two-factor-enabled", subject: "Two-factor codes were turned on",
            body: "Signing in to your account now also needs a code from an authenticator app.\n\nIf this was not you, contact support at once."
        )
    }

    static func twoFactorReset(to email: String) -> MailMessage {
        MailMessage(
            to: email, kind: "two-factor-reset", subject: "Two-factor codes were turned off by support",
            body:
                "Support turned off the two-factor codes of your account; signing in needs only your password now.\n\nTurn them on again in the app. If you did not ask for this, contact support at once."
        )
    }

    static func passwordChanged(to email: String) -> MailMessage {
        MailMessage(
            to: email, kind: "password-changed", subject: "Your password was changed",
            body: "The password of your account was just changed and other sessions were signed out.\n\nIf this was not you, reset your password now."
        )
    }

    static func newDevice(to email: String, client: ClientInfo, at date: Date) -> MailMessage {
        MailMessage(
            to: email, kind: "new-device", subject: "New sign-in to your account",
            body:
                "Your account was signed in from a new device (\(client.userAgent ?? "unknown app")) at \(ISO8601DateFormatter().string(from: date)).\n\nIf this was not you, change your password now."
        )
    }

    static func accountLocked(to email: String, minutes: Int) -> MailMessage {
        MailMessage(
            to: email, kind: "account-locked", subject: "Sign-in to your account is locked",
            body:
                "After repeated failed sign-ins, sign-in to your account is locked for \(minutes) minutes.\n\nIf this was not you, consider resetting your password; a reset also lifts the lock."
        )
    }

    static func purchaseRequested(to email: String, profileName: String, item: String, tokens: Int64) -> MailMessage {
        MailMessage(
            to: email, kind: "purchase-requested", subject: "\(profileName) asks to buy \(item)",
            body:
                "\(profileName) asks to unlock \(item) for \(tokens) tokens. The tokens are held for 48 hours: approve or decline the request in the app (on your own profile). If you do nothing, the request expires and the tokens are released."
        )
    }
}
