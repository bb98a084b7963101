import Clock
import Foundation
import Logging
import Synchronization

/// One outgoing message. `secrets` are substrings (codes) that must never reach a log.
public struct MailMessage: Sendable, Equatable {
    public let to: String
    /// What the message is (e.g. `verification-code`), for logs: its subject may carry a name, its body a code.
    public let kind: String
    public let subject: String
    public let body: String
    public let secrets: [String]

    public init(to: String, kind: String = "mail", subject: String, body: String, secrets: [String] = []) {
        self.to = to
        self.kind = kind
        self.subject = subject
        self.body = body
        self.secrets = secrets
    }

    /// The body with every secret replaced by `[redacted]`.
    public var redactedBody: String { secrets.reduce(body) { $0.replacingOccurrences(of: $1, with: "[redacted]") } }

    /// A complete RFC 5322 message (CRLF line ends, required headers).
    public func rfc5322(from: String, date: Date, messageID: String) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss Z"
        let headers = [
            "From: \(from)", "To: \(Self.headerSafe(to))", "Subject: \(Self.headerSafe(subject))", "Date: \(formatter.string(from: date))",
            "Message-ID: <\(messageID)>", "MIME-Version: 1.0", "Content-Type: text/plain; charset=utf-8", "Content-Transfer-Encoding: 8bit",
        ]
        let normalizedBody = body.replacingOccurrences(of: "\r\n", with: "\n").replacingOccurrences(of: "\n", with: "\r\n")
        return headers.joined(separator: "\r\n") + "\r\n\r\n" + normalizedBody + "\r\n"
    }

    /// Header values never carry line breaks (no header injection).
    static func headerSafe(_ value: String) -> String {
        value.replacingOccurrences(of: "\r", with: " ").replacingOccurrences(of: "\n", with: " ")
    }
}

/// Sends mail. Implementations must not log secrets.
public protocol Mailer: Sendable {
    func send(_ message: MailMessage, logger: Logger) async throws
}

/// `MAIL_TRANSPORT` parsed.
public enum MailTransport: Sendable, Equatable {
    case log
    case file(directory: String)
    case sendmail(path: String)

    public static func parse(_ value: String?) throws(MailTransportError) -> MailTransport {
        guard let value, !value.isEmpty, value != "log" else { return .log }
        if value.hasPrefix("file:"), value.count > 5 { return .file(directory: String(value.dropFirst(5))) }
        if value.hasPrefix("sendmail:"), value.count > 9 { return .sendmail(path: String(value.dropFirst(9))) }
        throw MailTransportError(value: value)
    }

    public func makeMailer(from: String) -> any Mailer {
        switch self {
        case .log: LogMailer()
        case .file(let directory): FileMailer(directory: directory, from: from)
        case .sendmail(let path): SendmailMailer(path: path, from: from)
        }
    }
}

public struct MailTransportError: Error, CustomStringConvertible {
    let value: String
    public var description: String { "MAIL_TRANSPORT must be log, file:DIR or sendmail:PATH (got '\(value)')" }
}

/// Logs the message with its secrets redacted (use `file:DIR` to read codes locally).
public struct LogMailer: Mailer {
    public init() {}
    public func send(_ message: MailMessage, logger: Logger) async throws {
        logger.info("mail", metadata: ["to": "\(message.to)", "subject": "\(message.subject)", "body": "\(message.redactedBody)"])
    }
}

/// Writes one RFC 5322 `.eml` file per message, atomically (temp file, then rename). Names sort in the order the
/// messages were sent, also within one millisecond (a flushed backlog goes out that fast; `ls | tail -1` is the last).
public struct FileMailer: Mailer {
    private static let sequence = Atomic<Int>(0)
    public let directory: String
    let from: String

    public init(directory: String, from: String) {
        self.directory = directory
        self.from = from
    }

    public func send(_ message: MailMessage, logger: Logger) async throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let id = FreshID.uuid()
        let now = Date()
        let sent = Self.sequence.add(1, ordering: .relaxed).newValue
        let name = String(format: "%013lld-%09d", Int64(now.timeIntervalSince1970 * 1000), sent % 1_000_000_000) + "-\(id).eml"
        let text = message.rfc5322(from: from, date: now, messageID: "\(id)@account-service")
        let temporary = URL(fileURLWithPath: directory).appendingPathComponent(".\(name).tmp")
        let final = URL(fileURLWithPath: directory).appendingPathComponent(name)
        try Data(text.utf8).write(to: temporary)
        try FileManager.default.moveItem(at: temporary, to: final)
        logger.debug("mail written", metadata: ["file": "\(final.lastPathComponent)"])
    }
}

/// Pipes the message to a sendmail-compatible program (`-t -i`: recipients from headers, lone dots kept).
public struct SendmailMailer: Mailer {
    public let path: String
    let from: String

    public init(path: String, from: String) {
        self.path = path
        self.from = from
    }

    public func send(_ message: MailMessage, logger: Logger) async throws {
        let text = message.rfc5322(from: from, date: Date(), messageID: "\(FreshID.uuid())@account-service")
        let path = self.path
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: path)
            process.arguments = ["-t", "-i"]
            let pipe = Pipe()
            process.standardInput = pipe
            process.terminationHandler = { finished in
                if finished.terminationStatus == 0 {
                    continuation.resume()
                } else {
                    continuation.resume(throwing: SendmailError(status: finished.terminationStatus))
                }
            }
            do {
                try process.run()
            } catch {
                continuation.resume(throwing: error)
                return
            }
            // A write failure shows up as the program's exit status, reported by terminationHandler.
            try? pipe.fileHandleForWriting.write(contentsOf: Data(text.utf8))
            try? pipe.fileHandleForWriting.close()
        }
    }
}

public struct SendmailError: Error, CustomStringConvertible {
    public let status: Int32
    public var description: String { "sendmail exited with status \(status)" }
}
