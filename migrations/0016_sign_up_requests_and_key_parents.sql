-- Why: two holes of issue 33. Sign-up pre-hijacking: a code activates only what the request it was mailed for asked: each sign-up
-- is its own row with its own code (an HMAC), password hash and name, and verifying a code copies that row's password
-- and name onto the account. A pending account carries no password of its own, so nothing anyone typed is activated
-- without a code that only the mailbox sees. Rows die with verification (the used one is kept, marked, for
-- `otp_already_used`), with Sign in with Apple or an email change proving the address, and after a day.
CREATE TABLE sign_up_requests (
    id TEXT PRIMARY KEY,
    email TEXT NOT NULL,
    name TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    code_hmac TEXT,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    consumed_at_ms BIGINT
);
CREATE INDEX sign_up_requests_email ON sign_up_requests (email, created_at_ms);
CREATE INDEX sign_up_requests_created ON sign_up_requests (created_at_ms);

-- Pending sign-ups of earlier versions keep working: their live code and password move into a request.
INSERT INTO sign_up_requests (id, email, name, password_hash, code_hmac, created_at_ms, expires_at_ms, consumed_at_ms)
SELECT u.id, u.email, u.name, u.password_hash, c.code_hmac, u.updated_at_ms, c.expires_at_ms, NULL
FROM users u JOIN otp_codes c ON c.email = u.email AND c.purpose = 'verify'
WHERE u.email_verified = FALSE AND u.deleted_at_ms IS NULL AND u.password_hash IS NOT NULL AND c.consumed_at_ms IS NULL;
UPDATE users SET password_hash = NULL WHERE email_verified = FALSE;
DELETE FROM otp_codes WHERE purpose = 'verify';

-- A key made by another key remembers it (`parent_id`), and revoking a key revokes every key made under it. Keys made
-- by keys before this migration find their parent in the audit log.
ALTER TABLE api_keys ADD COLUMN parent_id TEXT;
UPDATE api_keys SET parent_id = (
    SELECT substr(a.actor, 5) FROM audit_log a WHERE a.action = 'api_key_created' AND a.subject = api_keys.id AND a.actor LIKE 'key:%'
);
CREATE INDEX api_keys_parent ON api_keys (parent_id);
