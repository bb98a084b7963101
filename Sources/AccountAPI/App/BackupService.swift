import Clock
import Foundation
import Logging
import Metrics
import ServiceLifecycle
import Storage

/// Scheduled backups inside `serve` (`BACKUP_DIR`, `BACKUP_EVERY`, `BACKUP_KEEP`): every interval a copy of the database
/// as `BACKUP_DIR/account-service-STAMP.sqlite`, media files into the shared `BACKUP_DIR/media` (content-addressed, so
/// each pass copies only new files), and the oldest copies beyond the last `keep` removed. A failed pass is logged and
/// counted and the next one runs on time; a shutdown stops the loop (a copy in progress finishes or is discarded).
struct BackupService: Service {
    let config: AppConfig
    let schedule: BackupSchedule
    let clock: any TimeSource
    let logger: Logger

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: .seconds(schedule.everySeconds))
                do { try await backUpOnce() } catch is CancellationError { return } catch {
                    Counter(label: "backup_failures_total").increment()
                    logger.error("scheduled backup failed", metadata: ["error": "\(error)"])
                }
            }
        }
    }

    static let prefix = "account-service-"

    func backUpOnce() async throws {
        let directory = URL(fileURLWithPath: schedule.directory, isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
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

    /// Keeps the newest `keep` copies (their names sort by time); returns how many it removed.
    func prune(_ directory: URL) throws -> Int {
        let copies = try FileManager.default.contentsOfDirectory(atPath: directory.path)
            .filter { $0.hasPrefix(Self.prefix) && $0.hasSuffix(".sqlite") }.sorted()
        let old = copies.dropLast(schedule.keep)
        for name in old { try FileManager.default.removeItem(at: directory.appendingPathComponent(name)) }
        return old.count
    }
}
