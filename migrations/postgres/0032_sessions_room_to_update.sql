-- Why: a session's row is written once a minute while it is used (its idle expiry slides), and `last_used_at_ms` is in
-- no index, so that update can stay on the row's own page (a HOT update, no index touched) when the page has room.
-- Full pages made every such update write a new row version elsewhere and a new entry in each of the table's four
-- indexes: on a freshly seeded million-user database a touch touched 15 buffers, with room on its page 8
-- (docs/performance.md "At scale"). A fifth of each page is kept free from now on; pages written before keep what they
-- have until rows on them go. SQLite has no such setting. The lock this takes lets reads and writes go on.
ALTER TABLE sessions SET (fillfactor = 80);
