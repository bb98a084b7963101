#ifndef CSQLITE_SUPPORT_H
#define CSQLITE_SUPPORT_H

/// Turns on SQLite's query planner stability guarantee for one connection (`db` is a `sqlite3 *` from
/// sqlite-nio's vendored library). Without it a statement whose plan might depend on a bound value is
/// re-prepared whenever that value changes, which is every call for statements that bind "now".
/// Swift cannot call the variadic `sqlite3_db_config`, hence this C function. Returns the SQLite result code.
int as_sqlite_enable_qpsg(void *db);

#endif
