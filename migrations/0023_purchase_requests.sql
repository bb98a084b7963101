-- Why: ask to buy (issue 36). A profile that cannot make purchases asks for a premium pack: the request holds the
-- price (the hold's id is kept) for 48 hours until the owner approves (the hold is captured and the pack unlocked, once)
-- or declines (voided); past `expires_at_ms` it is expired and the ledger releases the hold. At most one pending request
-- per profile and pack: a repeated ask merges into it.
CREATE TABLE purchase_requests (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    profile_id TEXT NOT NULL,
    pack_id TEXT NOT NULL,
    tokens BIGINT NOT NULL,
    hold_id TEXT,
    status TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    resolved_at_ms BIGINT
);
CREATE UNIQUE INDEX purchase_requests_pending ON purchase_requests (profile_id, pack_id) WHERE status = 'pending';
CREATE INDEX purchase_requests_user ON purchase_requests (user_id, created_at_ms);
