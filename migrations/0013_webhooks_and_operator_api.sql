-- Why: events out (issue 27). Every module records its events in the same transaction as the change (outbox_events);
-- a leased worker fans each event out to the subscribed endpoints (webhook_deliveries, one row per endpoint and event,
-- the same body and webhook-id on every try) and records every try (webhook_attempts). Endpoint secrets are sealed
-- (AES-GCM under a key derived from SERVER_SECRET): they must be recoverable to sign, so they cannot be hashed.
-- API keys may expire (operator API).
CREATE TABLE outbox_events (
    id TEXT PRIMARY KEY,
    type TEXT NOT NULL,
    user_id TEXT,
    data TEXT NOT NULL,
    balance_before BIGINT,
    balance_after BIGINT,
    created_at_ms BIGINT NOT NULL
);
-- The outbox holds only events not yet fanned out: fan-out copies each into its deliveries and deletes it, so the table
-- stays small and needs no index beyond its key (ids lead with their creation time, so key order is time order).

CREATE TABLE webhook_endpoints (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    description TEXT,
    events TEXT NOT NULL,
    balance_low_threshold BIGINT,
    secret_sealed TEXT NOT NULL,
    previous_secret_sealed TEXT,
    previous_secret_until_ms BIGINT,
    disabled_at_ms BIGINT,
    disabled_reason TEXT,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    deleted_at_ms BIGINT
);

CREATE TABLE webhook_deliveries (
    id TEXT PRIMARY KEY,
    endpoint_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    body TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts BIGINT NOT NULL DEFAULT 0,
    next_attempt_at_ms BIGINT NOT NULL,
    retry_until_ms BIGINT NOT NULL,
    locked_until_ms BIGINT,
    last_status_code BIGINT,
    last_error TEXT,
    last_attempt_at_ms BIGINT,
    created_at_ms BIGINT NOT NULL,
    delivered_at_ms BIGINT,
    UNIQUE (endpoint_id, event_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at_ms) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, created_at_ms);

CREATE TABLE webhook_attempts (
    delivery_id TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    at_ms BIGINT NOT NULL,
    status_code BIGINT,
    error TEXT,
    duration_ms BIGINT NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
);

ALTER TABLE api_keys ADD COLUMN expires_at_ms BIGINT;
CREATE INDEX audit_log_at ON audit_log (at_ms);
CREATE INDEX audit_log_actor_at ON audit_log (actor, at_ms);

-- Ledger corrections: each operation is reversed at most once (the compensating operation's id beside it).
CREATE TABLE ledger_reversals (
    operation_id TEXT PRIMARY KEY,
    reversal_operation_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);
