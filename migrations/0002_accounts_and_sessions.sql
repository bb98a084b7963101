-- Why: accounts and sessions. Users with Argon2id password hashes, sessions stored only as the SHA-256 of
-- their bearer token, one-time codes stored only as an HMAC, mail send budgets and sign-in failure counters
-- kept in the database (shared by every service node, never only in memory), known devices for new-device
-- notices, the family profiles that verification creates (the default one) and the profiles work extends,
-- and the welcome-token hook that records the one-time grant until the ledger takes it over.
CREATE TABLE users (
    id TEXT PRIMARY KEY,
    email TEXT UNIQUE,
    name TEXT NOT NULL,
    password_hash TEXT,
    email_verified BOOLEAN NOT NULL DEFAULT FALSE,
    role TEXT NOT NULL DEFAULT 'user' CHECK (role IN ('user', 'admin')),
    prompt_enhancement_enabled BOOLEAN NOT NULL DEFAULT TRUE,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    deleted_at_ms BIGINT
);

CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users (id),
    token_hash TEXT NOT NULL UNIQUE,
    created_at_ms BIGINT NOT NULL,
    last_used_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    authenticated_at_ms BIGINT NOT NULL,
    user_agent TEXT,
    ip TEXT,
    selected_profile_id TEXT,
    revoked_at_ms BIGINT
);
CREATE INDEX sessions_user ON sessions (user_id);

CREATE TABLE otp_codes (
    email TEXT NOT NULL,
    purpose TEXT NOT NULL CHECK (purpose IN ('verify', 'reset')),
    code_hmac TEXT,
    expires_at_ms BIGINT NOT NULL,
    wrong_attempts BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (email, purpose)
);

CREATE TABLE mail_budgets (
    email_hash TEXT PRIMARY KEY,
    window_started_at_ms BIGINT NOT NULL,
    sends_in_window BIGINT NOT NULL,
    last_sent_at_ms BIGINT NOT NULL
);

CREATE TABLE sign_in_throttles (
    throttle_key TEXT PRIMARY KEY,
    failures BIGINT NOT NULL,
    last_failure_at_ms BIGINT NOT NULL,
    locked_until_ms BIGINT
);

CREATE TABLE known_devices (
    user_id TEXT NOT NULL REFERENCES users (id),
    fingerprint TEXT NOT NULL,
    first_seen_at_ms BIGINT NOT NULL,
    PRIMARY KEY (user_id, fingerprint)
);

CREATE TABLE family_profiles (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users (id),
    name TEXT NOT NULL,
    avatar TEXT,
    is_default BOOLEAN NOT NULL DEFAULT FALSE,
    can_make_purchases BOOLEAN NOT NULL DEFAULT FALSE,
    can_use_custom_content_types BOOLEAN NOT NULL DEFAULT FALSE,
    pin_hash TEXT,
    pin_failed_attempts BIGINT NOT NULL DEFAULT 0,
    pin_locked_until_ms BIGINT,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
CREATE UNIQUE INDEX family_profiles_name ON family_profiles (user_id, lower(name));
CREATE UNIQUE INDEX family_profiles_one_default ON family_profiles (user_id) WHERE is_default;

CREATE TABLE welcome_grants (
    user_id TEXT PRIMARY KEY REFERENCES users (id),
    amount_tokens BIGINT NOT NULL CHECK (amount_tokens >= 0),
    granted_at_ms BIGINT NOT NULL
);
