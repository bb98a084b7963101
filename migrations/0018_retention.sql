-- Why: what grows without bound is forgotten in batches by the background sweeper (issue 35, docs/operations.md
-- "Retention"), and each of those batched deletes finds its rows by an index instead of scanning the table:
-- sessions by expiry, finished webhook deliveries by age, second-factor challenges and email changes by expiry.
-- Operators' list of the newest users reads an index in its order instead of sorting every user
-- (`QueryPlanTests` found it reading 400 buffers per call at 30,000 users).
CREATE INDEX sessions_expires ON sessions (expires_at_ms);
CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created_at_ms);
CREATE INDEX mfa_challenges_expires ON mfa_challenges (expires_at_ms);
CREATE INDEX email_changes_expires ON email_changes (expires_at_ms);
CREATE INDEX users_created ON users (created_at_ms DESC, id);
CREATE INDEX otp_codes_expires ON otp_codes (expires_at_ms);
