-- Why: passkeys (issue 39). One row per WebAuthn credential: its id (base64url, unique across accounts), the account
-- and the user handle the authenticator stores for it, the COSE public key (base64url of its CBOR), the signature
-- counter (a counter that goes back means a cloned authenticator), and the backup flags the authenticator reported.
CREATE TABLE passkeys (
    credential_id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users (id),
    user_handle TEXT NOT NULL,
    public_key TEXT NOT NULL,
    algorithm BIGINT NOT NULL,
    sign_count BIGINT NOT NULL,
    name TEXT NOT NULL,
    backup_eligible BOOLEAN NOT NULL,
    backed_up BOOLEAN NOT NULL,
    created_at_ms BIGINT NOT NULL,
    last_used_at_ms BIGINT
);
CREATE INDEX passkeys_user ON passkeys (user_id, created_at_ms);

-- Challenges are issued without storage (an HMAC under the server key binds purpose, account and expiry); each one is
-- written here when an answer uses it, so a second use is refused. Rows go once the challenge has expired.
CREATE TABLE webauthn_used_challenges (
    challenge_hash TEXT PRIMARY KEY,
    expires_at_ms BIGINT NOT NULL
);
CREATE INDEX webauthn_used_challenges_expiry ON webauthn_used_challenges (expires_at_ms);
