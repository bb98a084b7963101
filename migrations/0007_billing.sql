-- Why: billing (Apple StoreKit 2 / App Store Server Notifications V2, Stripe webhooks). Every received event is
-- kept with its verdict for audit and replay; `dedupe_key` (the provider's event id, set only for verified
-- events) makes each event take effect once even when delivered twice at the same moment. `billing_accounts`
-- binds a provider purchase (Apple originalTransactionId, Stripe subscription/customer) to one account, never
-- moved silently. `billing_grants` records what each provider purchase granted (key = transaction / checkout
-- session / invoice id), so grants happen once and refunds claw back exactly that, cumulatively.
CREATE TABLE billing_events (
    id TEXT PRIMARY KEY,
    provider TEXT NOT NULL CHECK (provider IN ('apple', 'stripe')),
    source TEXT NOT NULL,
    dedupe_key TEXT UNIQUE,
    external_id TEXT,
    event_type TEXT,
    user_id TEXT,
    original_id TEXT,
    environment TEXT,
    verdict TEXT NOT NULL,
    detail TEXT,
    signed_at_ms BIGINT,
    raw TEXT NOT NULL,
    raw_sha256 TEXT NOT NULL,
    received_at_ms BIGINT NOT NULL,
    applied_at_ms BIGINT
);
CREATE INDEX billing_events_user ON billing_events (user_id, received_at_ms);
CREATE INDEX billing_events_unmatched ON billing_events (provider, original_id, verdict);

CREATE TABLE billing_accounts (
    provider TEXT NOT NULL,
    external_id TEXT NOT NULL,
    user_id TEXT NOT NULL REFERENCES users (id),
    environment TEXT,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (provider, external_id)
);
CREATE INDEX billing_accounts_user ON billing_accounts (user_id);

CREATE TABLE billing_grants (
    provider TEXT NOT NULL,
    source_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('tokens', 'period')),
    product_id TEXT NOT NULL,
    payment_ref TEXT,
    tokens BIGINT NOT NULL CHECK (tokens >= 0),
    clawed_tokens BIGINT NOT NULL DEFAULT 0,
    shortfall_tokens BIGINT NOT NULL DEFAULT 0,
    period_key TEXT,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (provider, source_id)
);
CREATE INDEX billing_grants_payment ON billing_grants (provider, payment_ref);
