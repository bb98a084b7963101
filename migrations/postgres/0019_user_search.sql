-- Why: operators search users by the start of their email (GET /api/admin/users?query=), paged by email. The range
-- `email >= prefix AND email < prefix || U+10FFFF` holds exactly the emails with that prefix only under byte order, and
-- the database's default collation may not be byte order: the query compares `email COLLATE "C"`, and this index serves
-- that expression (with the generic plans the service uses, where LIKE 'prefix%' could not use an index). SQLite
-- compares bytes by default, so its unique index on email already serves the same query.
CREATE INDEX users_email_bytewise ON users ((email COLLATE "C"));
