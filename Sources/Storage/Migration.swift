import Crypto
import Foundation
import Logging

/// One forward-only migration file, compiled into the binary (see `scripts/embed-resources`).
public struct Migration: Sendable, Equatable {
    /// The number at the start of the file name (`0003_add_holds.sql` → 3).
    public let version: Int
    /// The file name, used in every message about it.
    public let file: String
    public let sql: String

    public init(version: Int, file: String, sql: String) {
        self.version = version
        self.file = file
        self.sql = sql
    }

    /// `shared` with each engine override in place of the shared migration of its version (or added, for a migration only
    /// that engine needs), in version order.
    public static func merged(_ shared: [Migration], overrides: [Migration]) -> [Migration] {
        var byVersion = Dictionary(uniqueKeysWithValues: shared.map { ($0.version, $0) })
        for migration in overrides { byVersion[migration.version] = migration }
        return byVersion.values.sorted { $0.version < $1.version }
    }

    /// SHA-256 of the file's text, recorded when applied; a later difference refuses start-up.
    public var checksum: String {
        hexString(SHA256.hash(data: Data(sql.utf8)))
    }

    /// The file split into single statements (drivers prepare one statement at a time). Knows about
    /// quotes, `--` comments, `$$` bodies and SQLite trigger bodies (`CREATE TRIGGER … BEGIN … END;`), which may contain
    /// semicolons.
    public var statements: [String] { Self.split(sql) }

    static func split(_ sql: String) -> [String] {
        var statements: [String] = []
        var current = ""
        var inQuote = false
        var inComment = false
        var inDollar = false
        let chars = Array(sql)
        var i = 0
        while i < chars.count {
            let ch = chars[i]
            let next: Character? = i + 1 < chars.count ? chars[i + 1] : nil
            if inComment {
                if ch == "\n" { inComment = false; current.append(ch) }
            } else if inQuote {
                current.append(ch)
                if ch == "'" { inQuote = false }
            } else if inDollar {
                current.append(ch)
                if ch == "$" && next == "$" { current.append("$"); i += 1; inDollar = false }
            } else if ch == "-" && next == "-" {
                inComment = true
                i += 1
            } else if ch == "'" {
                inQuote = true
                current.append(ch)
            } else if ch == "$" && next == "$" {
                inDollar = true
                current.append("$$")
                i += 1
            } else if ch == ";" && Self.inTriggerBody(current) {
                current.append(ch)
            } else if ch == ";" {
                let trimmed = current.trimmingCharacters(in: .whitespacesAndNewlines)
                if !trimmed.isEmpty { statements.append(trimmed) }
                current = ""
            } else {
                current.append(ch)
            }
            i += 1
        }
        let trimmed = current.trimmingCharacters(in: .whitespacesAndNewlines)
        if !trimmed.isEmpty { statements.append(trimmed) }
        return statements
    }
}

extension Migration {
    /// True while `statement` is a `CREATE TRIGGER` whose body has not reached its `END` yet.
    static func inTriggerBody(_ statement: String) -> Bool {
        // Asked at every semicolon: only a trigger's text is read whole.
        guard statement.drop(while: \.isWhitespace).prefix(14).uppercased() == "CREATE TRIGGER" else { return false }
        let text = statement.trimmingCharacters(in: .whitespacesAndNewlines).uppercased()
        guard text.contains("BEGIN") else { return false }
        return !(text.hasSuffix("END") && (text.dropLast(3).last.map { $0.isWhitespace || $0 == ";" } ?? false))
    }
}

/// Applies migrations in order and records them with checksums. Callers hold the engine's lock.
enum MigrationRunner {
    static func apply(
        _ migrations: [Migration], executor: any SQLExecutor, logger: Logger, inTransaction: Bool = false
    ) async throws -> [Migration] {
        try await executor.query(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version BIGINT PRIMARY KEY, file TEXT NOT NULL, checksum TEXT NOT NULL, applied_at BIGINT NOT NULL)
            """)
        let rows = try await executor.query("SELECT version, file, checksum FROM schema_migrations ORDER BY version")
        var appliedChecksums: [Int: String] = [:]
        for row in rows { appliedChecksums[Int(try row.int("version"))] = try row.string("checksum") }
        var newlyApplied: [Migration] = []
        for migration in migrations.sorted(by: { $0.version < $1.version }) {
            if let recorded = appliedChecksums[migration.version] {
                guard recorded == migration.checksum else { throw StorageError.migrationChecksumMismatch(file: migration.file) }
                continue
            }
            logger.info("applying migration", metadata: ["file": "\(migration.file)"])
            let statements = {
                for statement in migration.statements { try await executor.query(statement) }
                try await executor.query(
                    "INSERT INTO schema_migrations (version, file, checksum, applied_at) VALUES (?, ?, ?, ?)",
                    [migration.version, migration.file, migration.checksum, Date()])
            }
            do {
                // SQLite runs the whole batch in the caller's EXCLUSIVE transaction; PostgreSQL one transaction per file.
                if inTransaction { try await statements() } else { try await executor.inTransaction(begin: "BEGIN", statements) }
            } catch {
                throw StorageError.migrationFailed(file: migration.file, underlying: loggedDescription(of: error))
            }
            newlyApplied.append(migration)
        }
        return newlyApplied
    }
}
