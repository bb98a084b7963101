import Foundation

/// Typed rows: a store declares what it reads as a `Decodable` struct and gets it from a row instead of reading columns
/// by string (`try row.decode(SessionRecord.self)`, `tx.query(sql, binds, as: SessionRecord.self)`).
///
/// A property reads the column of its name in snake case (`userId` → `user_id`; a `CodingKeys` raw value is converted
/// the same way, so it may also name the column outright). A `Date` reads milliseconds from the `_ms` column every time
/// is stored in (`expiresAt` → `expires_at_ms`), or from a column of its own name. An optional property is nil for
/// NULL or an absent column. Integers, strings and booleans accept both engines' forms, as ``SQLRow``'s accessors do;
/// `RawRepresentable` enums decode from their raw value. A column that is missing or of another type throws
/// ``StorageError/decoding(column:)``; nothing traps.
extension SQLRow {
    public func decode<T: Decodable>(_ type: T.Type) throws -> T { try T(from: SQLRowDecoding(row: self)) }
}

extension SQLExecutor {
    /// The rows of one statement, each decoded as `T`.
    public func query<T: Decodable>(_ sql: String, _ binds: [any SQLBindable], as type: T.Type) async throws -> [T] {
        try await query(sql, binds).map { try $0.decode(T.self) }
    }

    /// The first row decoded as `T`, or nil.
    public func first<T: Decodable>(_ sql: String, _ binds: [any SQLBindable], as type: T.Type) async throws -> T? {
        try await query(sql, binds).first.map { try $0.decode(T.self) }
    }
}

/// `userId` → `user_id`, `URLKey` → `url_key`; names already in snake case stay as they are.
func snakeCased(_ name: String) -> String {
    var out = ""
    out.reserveCapacity(name.utf8.count + 4)
    var previousWasLower = false
    for character in name {
        if character.isUppercase {
            if previousWasLower { out.append("_") }
            out.append(contentsOf: character.lowercased())
            previousWasLower = false
        } else {
            out.append(character)
            previousWasLower = character.isLowercase || character.isNumber
        }
    }
    return out
}

struct SQLRowDecoding: Decoder {
    let row: SQLRow
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(Columns(row: row))
    }
    func unkeyedContainer() throws -> any UnkeyedDecodingContainer { throw StorageError.decoding(column: "(a list)") }
    func singleValueContainer() throws -> any SingleValueDecodingContainer { throw StorageError.decoding(column: "(a single value)") }

    struct Columns<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let row: SQLRow
        var codingPath: [any CodingKey] { [] }
        var allKeys: [Key] { row.columns.names.compactMap { Key(stringValue: $0) } }

        /// The column a key reads: its snake-case name, or for a time its `_ms` twin.
        func column(_ key: Key) -> String {
            let name = snakeCased(key.stringValue)
            if row.columns.positions[name] == nil, row.columns.positions[name + "_ms"] != nil { return name + "_ms" }
            return name
        }

        func contains(_ key: Key) -> Bool { row.columns.positions[column(key)] != nil }
        func decodeNil(forKey key: Key) throws -> Bool { row[column(key)] == .null }
        func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try row.bool(column(key)) }
        func decode(_ type: String.Type, forKey key: Key) throws -> String { try row.string(column(key)) }
        func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try row.int(column(key)) }
        func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try integer(key) }
        func decode(_ type: Float.Type, forKey key: Key) throws -> Float { Float(try decode(Double.self, forKey: key)) }
        func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try integer(key) }
        func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try integer(key) }
        func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try integer(key) }
        func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try integer(key) }
        func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try integer(key) }
        func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try integer(key) }
        func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try integer(key) }
        func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try integer(key) }
        func integer<T: FixedWidthInteger>(_ key: Key) throws -> T {
            let name = column(key)
            guard let value = T(exactly: try row.int(name)) else { throw StorageError.decoding(column: name) }
            return value
        }
        func decode(_ type: Double.Type, forKey key: Key) throws -> Double {
            let name = column(key)
            switch row[name] {
            case .double(let value): return value
            case .int(let value): return Double(value)
            default: throw StorageError.decoding(column: name)
            }
        }
        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
            let name = column(key)
            if type == Date.self, let date = try row.date(name) as? T { return date }
            return try T(from: Cell(row: row, column: name))
        }
        func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
            throw StorageError.decoding(column: column(key))
        }
        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer { throw StorageError.decoding(column: column(key)) }
        func superDecoder() throws -> any Decoder { SQLRowDecoding(row: row) }
        func superDecoder(forKey key: Key) throws -> any Decoder { SQLRowDecoding(row: row) }
    }

    /// One column as a single value, for types that decode themselves from one (`RawRepresentable` enums).
    struct Cell: Decoder, SingleValueDecodingContainer {
        let row: SQLRow
        let column: String
        var codingPath: [any CodingKey] { [] }
        var userInfo: [CodingUserInfoKey: Any] { [:] }

        func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> { throw StorageError.decoding(column: column) }
        func unkeyedContainer() throws -> any UnkeyedDecodingContainer { throw StorageError.decoding(column: column) }
        func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

        func decodeNil() -> Bool { row[column] == .null }
        func decode(_ type: Bool.Type) throws -> Bool { try row.bool(column) }
        func decode(_ type: String.Type) throws -> String { try row.string(column) }
        func decode(_ type: Int64.Type) throws -> Int64 { try row.int(column) }
        func decode(_ type: Double.Type) throws -> Double {
            switch row[column] {
            case .double(let value): return value
            case .int(let value): return Double(value)
            default: throw StorageError.decoding(column: column)
            }
        }
        func decode(_ type: Float.Type) throws -> Float { Float(try decode(Double.self)) }
        func decode(_ type: Int.Type) throws -> Int { try integer() }
        func decode(_ type: Int8.Type) throws -> Int8 { try integer() }
        func decode(_ type: Int16.Type) throws -> Int16 { try integer() }
        func decode(_ type: Int32.Type) throws -> Int32 { try integer() }
        func decode(_ type: UInt.Type) throws -> UInt { try integer() }
        func decode(_ type: UInt8.Type) throws -> UInt8 { try integer() }
        func decode(_ type: UInt16.Type) throws -> UInt16 { try integer() }
        func decode(_ type: UInt32.Type) throws -> UInt32 { try integer() }
        func decode(_ type: UInt64.Type) throws -> UInt64 { try integer() }
        func integer<T: FixedWidthInteger>() throws -> T {
            guard let value = T(exactly: try row.int(column)) else { throw StorageError.decoding(column: column) }
            return value
        }
        func decode<T: Decodable>(_ type: T.Type) throws -> T {
            if type == Date.self, let date = try row.date(column) as? T { return date }
            throw StorageError.decoding(column: column)
        }
    }
}
