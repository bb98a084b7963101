import AccountAPI
import ArgumentParser
import Clock
import Foundation
import Logging
import Storage

struct BackupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Copy the SQLite database (and with --media-to its media files) while the server runs and takes writes.",
        discussion: """
            The copy holds every write committed before it began (one consistent snapshot, written to FILE.partial and \
            renamed when complete); FILE must not exist. Media files are content-addressed: --media-to copies only the \
            files DIR lacks. Keep SERVER_SECRET (or DATA_DIR/server-secret) apart from the copies: the copies need it. \
            PostgreSQL is backed up with its own tools (docs/operations.md). \(CLI.databaseVariables)
            """)
    @Option(name: .long, help: "Where to write the copy (must not exist).") var to: String
    @Option(name: .customLong("media-to"), help: "A directory that receives the media files it lacks.") var mediaTo: String?

    func run() async throws {
        let config = try CLI.config()
        _ = Startup.bootstrapLogging(config)
        let taken = try await Backups.take(config, to: to, mediaTo: mediaTo)
        let media = mediaTo.map { ", \(taken.mediaFiles) new media file(s) (\(taken.mediaBytes) bytes) in \($0)" } ?? ""
        print(String(format: "backup: %@ — %d bytes in %.2f s", taken.snapshot.path, taken.snapshot.bytes, taken.snapshot.seconds) + media)
    }
}

struct RestoreCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Put a backup in place of the SQLite database, after checking it; the server must be stopped.",
        discussion: """
            Refused while a server or a tool has the database open. The copy must pass SQLite's integrity check, carry only \
            migrations this binary has (with the same checksums), migrate forward and balance (ledger verify) before \
            anything is replaced; a database already there needs --replace and is kept beside it as FILE.replaced-STAMP. \
            --media-from copies the media files DATA_DIR/media lacks. Use the SERVER_SECRET the backup was taken with. \
            \(CLI.databaseVariables)
            """)
    @Option(name: .long, help: "The backup to restore.") var from: String
    @Option(name: .customLong("media-from"), help: "A directory of media files (a backup's --media-to).") var mediaFrom: String?
    @Flag(name: .long, help: "Replace the database that is there (it is kept beside it, renamed).") var replace = false

    func run() async throws {
        let config = try CLI.config()
        let logger = Startup.bootstrapLogging(config)
        let restored = try await Backups.restore(
            config, from: from, mediaFrom: mediaFrom, replace: replace, clock: SystemTimeSource(), logger: logger)
        print(
            "restore: \(restored.path) — ledger verify OK (\(restored.accountsChecked) accounts, \(restored.transfersChecked) transfers), "
                + "\(restored.migrationsApplied) migration(s) applied, \(restored.mediaFiles) media file(s) copied")
        if let kept = restored.kept { print("the database that was there is kept as \(kept)") }
    }
}
