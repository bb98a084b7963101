import Foundation

/// A value bound into, or read out of, a SQL statement on either engine.
///
/// Booleans are stored as `BOOLEAN` on PostgreSQL and as `0/1` integers on SQLite; timestamps are
/// epoch milliseconds in `BIGINT` columns on both, so comparisons are exact and the clock is injectable.
public enum SQLValue: Sendable, Hashable, CustomStringConvertible {
    case null
    case int(Int64)
    case double(Double)
    case text(String)
    case bool(Bool)
    case bytes([UInt8])

    public var description: String {
        switch self {
        case .null: "NULL"
        case .int(let v): String(v)
        case .double(let v): String(v)
        case .text: "<text>"  // never print text values: they may hold secrets or personal data
        case .bool(let v): String(v)
        case .bytes(let b): "<\(b.count) bytes>"
        }
    }
}

/// Lets call sites write binds naturally: `[.init(userId), .init(amount)]` or literals.
public protocol SQLBindable: Sendable { var sqlValue: SQLValue { get } }
extension String: SQLBindable { public var sqlValue: SQLValue { .text(self) } }
extension Int: SQLBindable { public var sqlValue: SQLValue { .int(Int64(self)) } }
extension Int64: SQLBindable { public var sqlValue: SQLValue { .int(self) } }
extension Bool: SQLBindable { public var sqlValue: SQLValue { .bool(self) } }
extension Double: SQLBindable { public var sqlValue: SQLValue { .double(self) } }
extension Date: SQLBindable { public var sqlValue: SQLValue { .int(self.epochMilliseconds) } }
extension SQLValue: SQLBindable { public var sqlValue: SQLValue { self } }
extension Optional: SQLBindable where Wrapped: SQLBindable {
    public var sqlValue: SQLValue { self.map(\.sqlValue) ?? .null }
}

extension Date {
    /// Milliseconds since 1970, the storage format of every timestamp column.
    /// Saturates at Int64's ends (a date from a client, e.g. a cursor, can be anything; nothing traps).
    public var epochMilliseconds: Int64 {
        let ms = (self.timeIntervalSince1970 * 1000).rounded(.down)
        if let exact = Int64(exactly: ms) { return exact }
        return ms.isNaN ? 0 : ms < 0 ? .min : .max
    }
    public init(epochMilliseconds: Int64) { self.init(timeIntervalSince1970: Double(epochMilliseconds) / 1000) }
}

/// The column names of one result, shared by all its rows; a name that occurs twice means its last column.
public final class SQLColumns: Sendable {
    public let names: [String]
    let positions: [String: Int]

    public init(_ names: [String]) {
        self.names = names
        var positions = [String: Int](minimumCapacity: names.count)
        for (position, name) in names.enumerated() { positions[name] = position }
        self.positions = positions
    }
}

/// One result row, addressed by column name. Accessors accept both engines' representations. The rows of one result
/// share their column names, so a row is only its cells.
public struct SQLRow: Sendable {
    public let columns: SQLColumns
    let cells: [SQLValue]

    public init(columns: SQLColumns, cells: [SQLValue]) {
        precondition(columns.names.count == cells.count)
        self.columns = columns
        self.cells = cells
    }

    public init(_ values: [String: SQLValue]) {
        self.init(columns: SQLColumns(values.map(\.key)), cells: values.map(\.value))
    }

    /// Every column by name (for a name that occurs twice, its last column).
    public var values: [String: SQLValue] { columns.positions.mapValues { cells[$0] } }

    public subscript(_ column: String) -> SQLValue { columns.positions[column].map { cells[$0] } ?? .null }

    public func int(_ column: String) throws -> Int64 {
        guard let v = optionalInt(column) else { throw StorageError.decoding(column: column) }
        return v
    }
    public func optionalInt(_ column: String) -> Int64? {
        switch self[column] {
        case .int(let v): v
        case .bool(let b): b ? 1 : 0
        case .double(let d): Int64(exactly: d.rounded(.towardZero))  // nil, never a trap, outside Int64
        case .text(let s): Int64(s)
        default: nil
        }
    }
    public func string(_ column: String) throws -> String {
        guard let v = optionalString(column) else { throw StorageError.decoding(column: column) }
        return v
    }
    public func optionalString(_ column: String) -> String? {
        switch self[column] {
        case .text(let s): s
        case .int(let v): String(v)
        default: nil
        }
    }
    public func bool(_ column: String) throws -> Bool {
        switch self[column] {
        case .bool(let b): return b
        case .int(let v): return v != 0
        default: throw StorageError.decoding(column: column)
        }
    }
    public func date(_ column: String) throws -> Date { Date(epochMilliseconds: try int(column)) }
    public func optionalDate(_ column: String) -> Date? { optionalInt(column).map(Date.init(epochMilliseconds:)) }
}

/// Lowercase hex of bytes (digests, ETags, signatures) without `String(format:)`, which showed in request profiles.
/// Inlinable so that each caller gets a copy specialised for its sequence type (a bearer token is hashed and
/// hex-encoded on every request).
@inlinable
public func hexString<S: Sequence>(_ bytes: S) -> String where S.Element == UInt8 {
    let bytes = Array(bytes)
    return String(unsafeUninitializedCapacity: bytes.count * 2) { out in
        @inline(__always) func digit(_ value: UInt8) -> UInt8 { value < 10 ? 0x30 + value : 0x57 + value }
        for (index, byte) in bytes.enumerated() {
            out[2 * index] = digit(byte >> 4)
            out[2 * index + 1] = digit(byte & 0x0f)
        }
        return bytes.count * 2
    }
}
