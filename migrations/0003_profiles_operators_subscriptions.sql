-- Why: family profiles need plan limits, and plan limits need to know each user's subscription; operators
-- (role admin, or an API key with scope admin) manage profiles and comp subscriptions. This adds the
-- subscription record in the shape the subscriptions work completes (one row per user; no row, or an
-- ended one, means the free plan) and service API keys, stored only as the SHA-256 of the key.
CREATE TABLE subscriptions (
    user_id TEXT PRIMARY KEY REFERENCES users (id),
    plan_id TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('trialing', 'active', 'grace', 'past_due', 'canceled', 'expired')),
    provider TEXT NOT NULL CHECK (provider IN ('apple', 'stripe', 'manual')),
    current_period_start_ms BIGINT NOT NULL,
    current_period_end_ms BIGINT NOT NULL,
    will_renew BOOLEAN NOT NULL,
    pending_plan_id TEXT,
    provider_subscription_id TEXT,
    provider_customer_id TEXT,
    updated_at_ms BIGINT NOT NULL
);

CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    key_hash TEXT NOT NULL UNIQUE,
    scopes TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    last_used_at_ms BIGINT,
    revoked_at_ms BIGINT
);

CREATE INDEX family_profiles_user_created ON family_profiles (user_id, created_at_ms);
