-- Why: Sign in with Apple (issue 28). An account is linked to Apple's stable user id (`sub`), never to the email in the
-- token (relay addresses and email changes keep the link). Accounts made by Apple have no password (NULL hash).
CREATE TABLE user_identities (
    provider TEXT NOT NULL CHECK (provider IN ('apple')),
    subject TEXT NOT NULL,
    user_id TEXT NOT NULL REFERENCES users (id),
    email TEXT,
    created_at_ms BIGINT NOT NULL,
    last_used_at_ms BIGINT NOT NULL,
    PRIMARY KEY (provider, subject)
);
CREATE INDEX user_identities_user ON user_identities (user_id);

-- Apple's server-to-server notifications applied, by their `jti`: a replayed notification changes nothing.
CREATE TABLE apple_signin_events (
    jti TEXT PRIMARY KEY,
    received_at_ms BIGINT NOT NULL
);
