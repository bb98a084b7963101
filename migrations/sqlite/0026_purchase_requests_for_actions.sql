-- Why: ask to buy for priced actions (issue 36). A service reserving for a profile that cannot make purchases may ask
-- the owner instead (`askToBuy`): the request names the action and what history says of it instead of a pack, so
-- `pack_id` may be NULL (the unique index of pending requests per profile and pack leaves such rows alone: each ask is
-- its own request). SQLite cannot drop a NOT NULL in place: the table is rebuilt with its rows and indexes.
CREATE TABLE purchase_requests_new (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    profile_id TEXT NOT NULL,
    pack_id TEXT,
    tokens BIGINT NOT NULL,
    hold_id TEXT,
    status TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    resolved_at_ms BIGINT,
    action TEXT,
    description TEXT
);
INSERT INTO purchase_requests_new (id, user_id, profile_id, pack_id, tokens, hold_id, status, created_at_ms, expires_at_ms, resolved_at_ms)
SELECT id, user_id, profile_id, pack_id, tokens, hold_id, status, created_at_ms, expires_at_ms, resolved_at_ms FROM purchase_requests;
DROP TABLE purchase_requests;
ALTER TABLE purchase_requests_new RENAME TO purchase_requests;
CREATE UNIQUE INDEX purchase_requests_pending ON purchase_requests (profile_id, pack_id) WHERE status = 'pending';
CREATE INDEX purchase_requests_user ON purchase_requests (user_id, created_at_ms);
-- The hold of a pending request waits for the owner: only the approval (or a decline, or expiry) resolves it, never a
-- service's capture or void (the ledger's column; cleared when the owner approves an action).
ALTER TABLE ledger_holds ADD COLUMN awaiting_approval BOOLEAN NOT NULL DEFAULT FALSE;
