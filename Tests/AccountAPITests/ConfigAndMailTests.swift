import Auth
import Billing
import Entitlements
import Foundation
import Logging
import Mail
import Storage
import Testing

@testable import AccountAPI

@Suite("Configuration")
struct ConfigTests {
    @Test func defaults() throws {
        let config = try AppConfig.from(environment: [:])
        #expect(config.host == "127.0.0.1" && config.port == 8080)
        #expect(config.database == .sqlite(path: "data/account-service.sqlite"))
        #expect(config.mailTransport == .log)
        // The server's pool runs no keep-alive queries (PostgresPoolSettings says why); both settings can be changed.
        #expect(config.databasePool == PostgresPoolSettings(minimumConnections: 0, keepAliveSeconds: 0))
        let pool = try AppConfig.from(environment: ["DATABASE_POOL_MIN_CONNECTIONS": "10", "DATABASE_KEEPALIVE_SECONDS": "30"]).databasePool
        #expect(pool == PostgresPoolSettings(minimumConnections: 10, keepAliveSeconds: 30))
        // Statements wait at most 30 s for another transaction's locks unless DATABASE_LOCK_TIMEOUT_SECONDS says otherwise.
        #expect(config.databasePool.lockTimeoutSeconds == 30)
        #expect(try AppConfig.from(environment: ["DATABASE_LOCK_TIMEOUT_SECONDS": "0"]).databasePool.lockTimeoutSeconds == 0)
        for bad in ["-1", "3601", "soon"] {
            #expect(throws: ConfigError.self, "\(bad)") { try AppConfig.from(environment: ["DATABASE_LOCK_TIMEOUT_SECONDS": bad]) }
        }
        // At most 10 connections unless DATABASE_POOL_MAX_CONNECTIONS says otherwise; the minimum never above the maximum.
        #expect(config.databasePool.maximumConnections == 10)
        let fixed = try AppConfig.from(environment: ["DATABASE_POOL_MAX_CONNECTIONS": "40", "DATABASE_POOL_MIN_CONNECTIONS": "40"]).databasePool
        #expect(fixed == PostgresPoolSettings(minimumConnections: 40, keepAliveSeconds: 0, maximumConnections: 40))
        #expect(throws: ConfigError.self) { try AppConfig.from(environment: ["DATABASE_POOL_MIN_CONNECTIONS": "21"]) }
        for (max, min) in [("0", "0"), ("1001", "0"), ("4", "5"), ("four", "0")] {
            #expect(throws: ConfigError.self, "max \(max), min \(min)") {
                try AppConfig.from(environment: ["DATABASE_POOL_MAX_CONNECTIONS": max, "DATABASE_POOL_MIN_CONNECTIONS": min])
            }
        }
        // SQLite maps 1 GiB of its file for reads by default; 0 turns it off; past SQLite's own ceiling is refused.
        #expect(config.sqliteMapMiB == 1024)
        #expect(try AppConfig.from(environment: ["SQLITE_MMAP_MIB": "0"]).sqliteMapMiB == 0)
        #expect(throws: ConfigError.self) { try AppConfig.from(environment: ["SQLITE_MMAP_MIB": "2048"]) }
        // Bodies still arriving: 256 MiB in all, 32 per address, 60 s for a large one; a budget under 16 MiB would refuse
        // an operator's 12 MiB upload, so it is refused at start.
        #expect((config.httpBodyBufferMiB, config.httpBodyReadsPerClient, config.httpBodyTimeoutSeconds) == (256, 32, 60))
        let bodies = try AppConfig.from(environment: [
            "HTTP_BODY_BUFFER_MIB": "64", "HTTP_BODY_READS_PER_CLIENT": "4", "HTTP_BODY_TIMEOUT_SECONDS": "5",
        ])
        #expect((bodies.httpBodyBufferMiB, bodies.httpBodyReadsPerClient, bodies.httpBodyTimeoutSeconds) == (64, 4, 5))
        for (name, value) in [("HTTP_BODY_BUFFER_MIB", "8"), ("HTTP_BODY_READS_PER_CLIENT", "0"), ("HTTP_BODY_TIMEOUT_SECONDS", "0")] {
            #expect(throws: ConfigError.self, "\(name)=\(value)") { try AppConfig.from(environment: [name: value]) }
        }
    }

    @Test func everyProblemIsListedAtOnceAndSecretsAreNotPrinted() throws {
        let env = [
            "PORT": "99999", "DATABASE_URL": "mysql://root:hunter2secret@db/x", "MAIL_TRANSPORT": "pigeon", "LOG_LEVEL": "loud",
            "LOG_FORMAT": "xml", "SERVER_SECRET": "short",
        ]
        #expect { try AppConfig.from(environment: env) } throws: { error in
            guard let error = error as? ConfigError else { return false }
            return error.problems.count == 6 && !"\(error)".contains("hunter2secret") && !"\(error)".contains("short")
        }
        let pg = try AppConfig.from(environment: [
            "DATABASE_URL": "postgres://app:hunter2secret@127.0.0.1:5432/app", "SERVER_SECRET": String(repeating: "k", count: 40),
        ])
        #expect(!pg.description.contains("hunter2secret"))
        #expect(!pg.description.contains("kkkk"))
    }

    @Test func billingSettingsAreAllOrNothingAndSecretsStayHidden() throws {
        #expect(try AppConfig.from(environment: [:]).apple == nil)
        // One Apple variable alone lists what else is needed; Production needs the app's Apple ID.
        #expect { try AppConfig.from(environment: ["APPLE_BUNDLE_ID": "com.x"]) } throws: { error in
            let problems = (error as? ConfigError)?.problems ?? []
            return problems.count == 2 && problems.contains { $0.hasPrefix("APPLE_ROOT_CERTIFICATES") }
                && problems.contains { $0.hasPrefix("APPLE_ENVIRONMENT") }
        }
        #expect {
            try AppConfig.from(environment: ["APPLE_ROOT_CERTIFICATES": "a.pem", "APPLE_BUNDLE_ID": "com.x", "APPLE_ENVIRONMENT": "Production"])
        } throws: {
            ($0 as? ConfigError)?.problems == ["APPLE_APP_APPLE_ID is required with APPLE_ENVIRONMENT=Production"]
        }
        #expect {
            try AppConfig.from(environment: [
                "APPLE_ROOT_CERTIFICATES": "a.pem", "APPLE_BUNDLE_ID": "com.x", "APPLE_ENVIRONMENT": "Sandbox", "APPLE_ACCEPT_SANDBOX": "true",
            ])
        } throws: {
            ($0 as? ConfigError)?.problems == ["APPLE_ACCEPT_SANDBOX only applies with APPLE_ENVIRONMENT=Production"]
        }
        let config = try AppConfig.from(environment: [
            "APPLE_ROOT_CERTIFICATES": "root1.pem, root2.der", "APPLE_BUNDLE_ID": "com.x", "APPLE_ENVIRONMENT": "Production",
            "APPLE_APP_APPLE_ID": "123",
            "APPLE_ACCEPT_SANDBOX": "true", "STRIPE_WEBHOOK_SECRET": "whsec_aaaaaaaaaaaaaaaaaaaa,whsec_bbbbbbbbbbbbbbbbbbbb",
        ])
        #expect(
            config.apple?.rootCertificatePaths == ["root1.pem", "root2.der"] && config.apple?.appAppleID == 123 && config.apple?.acceptSandbox == true
        )
        #expect(config.stripeWebhookSecrets.count == 2)
        #expect(config.description.contains("apple=Production+sandbox") && config.description.contains("stripe=2 secret(s)"))
        #expect(!config.description.contains("whsec_"))
        #expect { try AppConfig.from(environment: ["STRIPE_WEBHOOK_SECRET": "short"]) } throws: { error in
            let problems = (error as? ConfigError)?.problems ?? []
            return problems.count == 1 && !"\(error)".contains("short,") && problems[0].hasPrefix("STRIPE_WEBHOOK_SECRET")
        }
    }

    @Test func anUnreadableAppleRootStopsStartup() async throws {
        var config = AppConfig()
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("cfg-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        config.database = .sqlite(path: scratch.appendingPathComponent("db.sqlite").path)
        config.plansFile = repositoryRoot.appendingPathComponent("plans.json").path
        config.dataDirectory = scratch.appendingPathComponent("data").path
        config.apple = AppConfig.AppleSettings(
            rootCertificatePaths: ["/nonexistent/root.pem"], bundleID: "com.x", appAppleID: nil, environment: .sandbox, acceptSandbox: false)
        await #expect { _ = try await Dependencies.make(config: config, logger: Logger(label: "t")) } throws: { error in
            "\(error)".contains("APPLE_ROOT_CERTIFICATES") && "\(error)".contains("/nonexistent/root.pem")
        }
        // Apple's real root loads.
        config.apple?.rootCertificatePaths = [repositoryRoot.appendingPathComponent("resources/apple-certs/AppleRootCA-G3.pem").path]
        let dependencies = try await Dependencies.make(config: config, logger: Logger(label: "t"))
        #expect(dependencies.billing.apple?.config.rootCertificates.count == 1)
        try await dependencies.database.close()
    }
}

@Suite("Mail")
struct MailTests {
    @Test func fileTransportWritesOneCompleteMessagePerFile() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("mail-\(UUID().uuidString)")
        let mailer = try MailTransport.parse("file:\(dir.path)").makeMailer(from: "Svc <no-reply@example.com>")
        try await mailer.send(
            MailMessage(to: "a@example.com", subject: "Your code\r\nBcc: evil@x", body: "Code: 123456\nBye", secrets: ["123456"]),
            logger: Logger(label: "t"))
        try await mailer.send(MailMessage(to: "b@example.com", subject: "Second", body: "Hi"), logger: Logger(label: "t"))
        let files = try FileManager.default.contentsOfDirectory(atPath: dir.path)
        #expect(files.count == 2)
        #expect(files.allSatisfy { $0.hasSuffix(".eml") && !$0.hasPrefix(".") })
        let first = try String(contentsOf: dir.appendingPathComponent(files.sorted()[0]), encoding: .utf8)
        #expect(first.contains("To: a@example.com\r\n"))
        #expect(first.contains("Subject: Your code  Bcc: evil@x\r\n"), "no header injection")
        #expect(first.contains("Message-ID: <") && first.contains("Date: ") && first.contains("From: Svc <no-reply@example.com>"))
        #expect(first.contains("\r\n\r\nCode: 123456\r\nBye\r\n"))
        try? FileManager.default.removeItem(at: dir)
    }

    @Test func sendmailTransportPipesTheMessageWithDashTDashI() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sendmail-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let script = dir.appendingPathComponent("fake-sendmail")
        try "#!/bin/sh\necho \"$@\" > \(dir.path)/args\ncat > \(dir.path)/message\n".write(to: script, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: script.path)
        let mailer = MailTransport.sendmail(path: script.path).makeMailer(from: "no-reply@example.com")
        try await mailer.send(MailMessage(to: "c@example.com", subject: "Hello", body: "Body"), logger: Logger(label: "t"))
        #expect(try String(contentsOf: dir.appendingPathComponent("args"), encoding: .utf8) == "-t -i\n")
        #expect(try String(contentsOf: dir.appendingPathComponent("message"), encoding: .utf8).contains("To: c@example.com\r\n"))
        try? FileManager.default.removeItem(at: dir)
    }

    /// `LOG_FORMAT=text`: the stream handler's line, with the handler's metadata, then the provider's, then the call's
    /// (each later one wins on a shared key), rendered when the line is written.
    @Test func textLogLinesCarryMergedMetadata() {
        final class Lines: TextOutputStream, @unchecked Sendable {
            var text = ""
            func write(_ string: String) { text += string }
        }
        let lines = Lines()
        let provider = Logger.MetadataProvider { ["trace": "t1", "shared": "provider"] }
        var logger = Logger(label: "unit") { TextLogHandler(label: $0, stream: lines, metadataProvider: provider) }
        logger.logLevel = .info
        logger[metadataKey: "connection"] = "7"
        logger[metadataKey: "shared"] = "handler"
        logger.debug("not written")
        logger.info("hello", metadata: ["request": "r1"])
        logger.info("again", metadata: ["shared": "call"])
        let written = lines.text.split(separator: "\n").map(String.init)
        #expect(written.count == 2)
        #expect(written.first?.hasSuffix(" info unit: connection=7 request=r1 shared=provider trace=t1 [AccountAPITests] hello") == true)
        #expect(written.last?.hasSuffix(" info unit: connection=7 shared=call trace=t1 [AccountAPITests] again") == true)
    }

    @Test func logTransportRedactsSecrets() {
        let message = MailMessage(to: "a@example.com", subject: "s", body: "Your code is 654321.", secrets: ["654321"])
        #expect(message.redactedBody == "Your code is [redacted].")
    }
}
