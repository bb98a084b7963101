-- Why: an erased account's address stayed in the bodies of its `user.created` and `user.verified` deliveries (kept 30
-- days, retried for 3, readable by operators), found by an outside tester. Deliveries now carry their event's user, so
-- the erasure can find and redact them; deliveries from before have none (they are gone within 30 days).
ALTER TABLE webhook_deliveries ADD COLUMN user_id TEXT;
CREATE INDEX webhook_deliveries_user ON webhook_deliveries (user_id) WHERE user_id IS NOT NULL;
