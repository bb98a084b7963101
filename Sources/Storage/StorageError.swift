/// Errors raised by the storage layer itself (not by the engines' drivers).
public enum StorageError: Error, CustomStringConvertible, Sendable {
    /// A column was missing or had an unexpected type.
    case decoding(column: String)
    /// The database could not be reached or answered too late; callers map this to 503.
    case unavailable(String)
    /// Too many of this process's requests wait for the same rows (``RowLanes``); callers map this to 429.
    case busy(String)
    /// A row stayed locked by another transaction for longer than the lock timeout (`DATABASE_LOCK_TIMEOUT_SECONDS`:
    /// PostgreSQL's `lock_timeout`, SQLSTATE 55P03; SQLite's write lock held by another process); callers map this to 503.
    /// The connection is fine and stays in the pool.
    case locked
    /// `DATABASE_URL` could not be understood.
    case invalidURL(String)
    /// An applied migration's file was edited after it ran.
    case migrationChecksumMismatch(file: String)
    /// A migration failed to apply.
    case migrationFailed(file: String, underlying: String)
    /// A uniqueness constraint was violated (SQLSTATE 23505 / SQLITE_CONSTRAINT_UNIQUE).
    case uniqueViolation(String)
    /// A text value held U+0000, which PostgreSQL cannot store; refused on both engines alike (client input → 400).
    case nulCharacter

    public var description: String {
        switch self {
        case .decoding(let c): "column '\(c)' is missing or has an unexpected type"
        case .unavailable(let m): "database unavailable: \(m)"
        case .busy(let m): "too many requests for the same rows: \(m)"
        case .locked: "a row stayed locked by another transaction for longer than the lock timeout"
        case .invalidURL(let m): "invalid DATABASE_URL: \(m)"
        case .migrationChecksumMismatch(let f):
            "migration \(f) was edited after it was applied (checksum differs); migrations are forward-only: add a new file instead"
        case .migrationFailed(let f, let u): "migration \(f) failed: \(u)"
        case .uniqueViolation(let m): "unique constraint violated: \(m)"
        case .nulCharacter: "text must not contain NUL (U+0000) characters"
        }
    }
}
