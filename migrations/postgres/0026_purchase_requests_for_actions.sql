-- Why: ask to buy for priced actions (issue 36). A service reserving for a profile that cannot make purchases may ask
-- the owner instead (`askToBuy`): the request names the action and what history says of it instead of a pack, so
-- `pack_id` may be NULL (the unique index of pending requests per profile and pack leaves such rows alone: each ask is
-- its own request).
ALTER TABLE purchase_requests ALTER COLUMN pack_id DROP NOT NULL;
ALTER TABLE purchase_requests ADD COLUMN action TEXT;
ALTER TABLE purchase_requests ADD COLUMN description TEXT;
-- The hold of a pending request waits for the owner: only the approval (or a decline, or expiry) resolves it, never a
-- service's capture or void (the ledger's column; cleared when the owner approves an action).
ALTER TABLE ledger_holds ADD COLUMN awaiting_approval BOOLEAN NOT NULL DEFAULT FALSE;
