-- Why: the App Store Server API (issue 39). A user's consent to share consumption data with Apple when they ask for a
-- refund (Apple refuses consumption information without it), and Apple's CONSUMPTION_REQUESTs, each answered once,
-- within Apple's 12 hours, by a worker that computes the answer from the ledger when it sends it.
CREATE TABLE billing_consents (
    user_id TEXT PRIMARY KEY REFERENCES users (id),
    apple_consumption_data BOOLEAN NOT NULL,
    updated_at_ms BIGINT NOT NULL
);

CREATE TABLE apple_consumption_requests (
    transaction_id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    notification_uuid TEXT NOT NULL,
    received_at_ms BIGINT NOT NULL,
    deadline_at_ms BIGINT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'sent', 'skipped', 'failed')),
    attempts BIGINT NOT NULL DEFAULT 0,
    next_try_at_ms BIGINT NOT NULL,
    answer TEXT,
    detail TEXT,
    resolved_at_ms BIGINT
);
CREATE INDEX apple_consumption_requests_due ON apple_consumption_requests (status, next_try_at_ms);
CREATE INDEX apple_consumption_requests_user ON apple_consumption_requests (user_id, received_at_ms);

-- Reconciliation runs: when each account's Apple purchases were last compared with Apple's records.
CREATE TABLE apple_reconciliations (
    user_id TEXT PRIMARY KEY,
    reconciled_at_ms BIGINT NOT NULL,
    repairs BIGINT NOT NULL
);
CREATE INDEX apple_reconciliations_due ON apple_reconciliations (reconciled_at_ms);
