import Foundation

/// A piece of SQL that one module exports so that another can run it inside its own statement (where one statement must
/// span owners for speed). The owner documents the binds it expects and the columns it yields, and pins them with a test.
public struct SQLFragment: Sendable, Equatable {
    /// The SQL text; placeholders are `?`.
    public let sql: String
    /// The columns it yields, by name (the contract the embedding statement relies on).
    public let columns: [String]

    public init(sql: String, columns: [String]) {
        self.sql = sql
        self.columns = columns
    }
}

/// Columns that one module contributes to another module's statement: select-list expressions and the joins they need.
/// The embedding statement provides the aliases the owner documents (for the entitlement snapshot: `x`, the subject row
/// with `id` and `selected_profile_id`, and `n`, with `now_ms` and `with_profile`).
public struct SQLJoinFragment: Sendable, Equatable {
    /// Select-list expressions (comma-separated, no leading or trailing comma).
    public let select: String
    /// Join clauses appended after the embedding statement's own joins (may be empty).
    public let joins: String
    /// The columns `select` yields, in order.
    public let columns: [String]

    public init(select: String, joins: String, columns: [String]) {
        self.select = select
        self.joins = joins
        self.columns = columns
    }
}
