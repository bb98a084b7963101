-- Why: email change and two-factor codes (issue 28). A requested change waits in email_changes (one per user, the code
-- stored only as an HMAC bound to the new address and the user). TOTP secrets are sealed (AES-GCM under a key derived
-- from SERVER_SECRET: they must be recovered to check codes); `last_step` refuses a code's replay within its window.
-- Recovery codes are stored as HMACs. A password sign-in with TOTP on yields a short-lived single-use challenge
-- (mfa_challenges, its token hashed) instead of a session; sessions record when a second factor was shown.
CREATE TABLE email_changes (
    user_id TEXT PRIMARY KEY REFERENCES users (id),
    new_email TEXT NOT NULL,
    code_hmac TEXT,
    expires_at_ms BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL
);

CREATE TABLE totp_factors (
    user_id TEXT PRIMARY KEY REFERENCES users (id),
    secret_sealed TEXT NOT NULL,
    enabled_at_ms BIGINT,
    last_step BIGINT NOT NULL DEFAULT 0,
    created_at_ms BIGINT NOT NULL
);

CREATE TABLE recovery_codes (
    user_id TEXT NOT NULL REFERENCES users (id),
    code_hmac TEXT NOT NULL,
    used_at_ms BIGINT,
    PRIMARY KEY (user_id, code_hmac)
);

CREATE TABLE mfa_challenges (
    token_hash TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users (id),
    expires_at_ms BIGINT NOT NULL,
    used_at_ms BIGINT,
    created_at_ms BIGINT NOT NULL
);

ALTER TABLE sessions ADD COLUMN mfa_at_ms BIGINT;
