-- Why: what grows without bound is forgotten in batches by the background sweeper (issue 35, docs/operations.md
-- "Retention"), and each of those batched deletes finds its rows by an index instead of scanning the table:
-- sessions by expiry, finished webhook deliveries by age, second-factor challenges and email changes by expiry.
CREATE INDEX sessions_expires ON sessions (expires_at_ms);
CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created_at_ms);
CREATE INDEX mfa_challenges_expires ON mfa_challenges (expires_at_ms);
CREATE INDEX email_changes_expires ON email_changes (expires_at_ms);
