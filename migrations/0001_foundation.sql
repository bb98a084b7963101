-- Why: the foundation needs one table every later capability writes to: the audit log of security-relevant
-- and operator actions (who, what, when, from where). Timestamps are epoch milliseconds from the service's
-- injected clock (never now() in SQL) so tests can move time and both engines compare them exactly.
CREATE TABLE audit_log (
    id TEXT PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    subject TEXT,
    ip TEXT,
    detail TEXT
);
CREATE INDEX audit_log_subject_at ON audit_log (subject, at_ms);
