#include "CSQLiteSupport.h"

// sqlite-nio's vendored SQLite, linked into the same binary; its C API carries the sqlite_nio_ prefix.
extern int sqlite_nio_sqlite3_db_config(void *db, int op, ...);

enum { AS_SQLITE_DBCONFIG_ENABLE_QPSG = 1007 };

int as_sqlite_enable_qpsg(void *db) {
    int enabled = 0;
    int rc = sqlite_nio_sqlite3_db_config(db, AS_SQLITE_DBCONFIG_ENABLE_QPSG, 1, &enabled);
    return rc == 0 && enabled != 1 ? 1 : rc;
}
