import Clock
import Foundation
import Logging
import Metrics
import ServiceLifecycle
import Storage
import Traces

/// Scheduled backups inside `serve` (`BACKUP_DIR`, `BACKUP_EVERY`, `BACKUP_KEEP`): every interval a copy of the database
/// as `BACKUP_DIR/account-service-STAMP.sqlite`, media files into the shared `BACKUP_DIR/media` (content-addressed, so
/// each pass copies only new files), and the oldest copies beyond the last `keep` removed. A failed pass is logged and
/// counted and the next one runs on time; a shutdown stops the loop (a copy in progress finishes or is discarded).
struct BackupService: NamedService {
    let config: AppConfig
    let schedule: BackupSchedule
    let clock: any TimeSource
    let logger: Logger

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            // The first pass comes when the newest copy is due (a server restarted more often than BACKUP_EVERY
            // still backs up), and never sooner than a few seconds after start.
            var wait = Double(schedule.everySeconds)
            if let newest = try? newestCopyAge() { wait = max(5, Double(schedule.everySeconds) - newest) } else { wait = 10 }
            while !Task.isCancelled {
                try await Task.sleep(for: .seconds(wait))
                wait = Double(schedule.everySeconds)
                do { try await Traces.span("job.backup") { try await backUpOnce() } } catch is CancellationError { return } catch {
                    Counter(label: "backup_failures_total").increment()
                    logger.error("scheduled backup failed", metadata: ["error": .error(error)])
                }
            }
        }
    }

    static let prefix = "account-service-"
    /// The names this service writes, and only those are ever removed: copies, and what a copy cut short left.
    static var copyName: Regex<Substring> { /account-service-\d{8}T\d{6}Z\.sqlite/ }
    static var leftoverName: Regex<(Substring, Substring?)> { /account-service-\d{8}T\d{6}Z\.sqlite\.partial-[0-9a-f]{8}(-journal|-wal|-shm)?/ }

    func backUpOnce() async throws {
        let directory = URL(fileURLWithPath: schedule.directory, isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        // A copy cut short (a kill, a crash) left its partial file: one pass runs at a time, so none is in progress.
        for name in try FileManager.default.contentsOfDirectory(atPath: directory.path) where name.wholeMatch(of: Self.leftoverName) != nil {
            try? FileManager.default.removeItem(at: directory.appendingPathComponent(name))
        }
        let now = clock.now()
        let file = directory.appendingPathComponent("\(Self.prefix)\(Backups.stamp(now)).sqlite").path
        let taken = try await Backups.take(config, to: file, mediaTo: directory.appendingPathComponent("media").path)
        Gauge(label: "backup_last_success_timestamp_seconds").record(now.timeIntervalSince1970)
        let removed = try prune(directory)
        logger.info(
            "backup written",
            metadata: [
                "file": "\(file)", "bytes": "\(taken.snapshot.bytes)", "seconds": "\(taken.snapshot.seconds)", "mediaFiles": "\(taken.mediaFiles)",
                "removed": "\(removed)",
            ])
    }

    /// The copies this service wrote, oldest first (their names sort by time); never the database it serves.
    func copies(_ directory: URL) throws -> [String] {
        let live = (try? Backups.sqlitePath(config)).map { URL(fileURLWithPath: SQLiteBackup.absolute($0)).resolvingSymlinksInPath().path }
        return try FileManager.default.contentsOfDirectory(atPath: directory.path)
            .filter { $0.wholeMatch(of: Self.copyName) != nil }
            .filter { directory.appendingPathComponent($0).resolvingSymlinksInPath().path != live }
            .sorted()
    }

    /// Keeps the newest `keep` copies; returns how many it removed.
    func prune(_ directory: URL) throws -> Int {
        let old = try copies(directory).dropLast(schedule.keep)
        for name in old { try FileManager.default.removeItem(at: directory.appendingPathComponent(name)) }
        return old.count
    }

    /// Seconds since the newest copy was written (nil: none yet).
    func newestCopyAge() throws -> Double? {
        let directory = URL(fileURLWithPath: schedule.directory, isDirectory: true)
        guard let newest = try copies(directory).last else { return nil }
        let written = try FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent(newest).path)[.modificationDate] as? Date
        return written.map { clock.now().timeIntervalSince($0) }
    }
}
