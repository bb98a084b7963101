-- Why: limits held against parallel requests. Every limited attempt (a password, PIN or code check, an unauthenticated
-- Argon2 run, a mail send) reserves its slot with one atomic statement before the slow work, and a late failure never
-- lowers a counter or lifts a lock; `attempt_budgets` is the one table for all of them (keys name the limit and what it
-- counts, e.g. a keyed hash of an address). It replaces the sign-in throttles (counted after the hash), the mail budgets
-- (one budget shared by every kind of mail) and the PIN counters on family_profiles. A consumed code keeps its HMAC so
-- that re-sending it can be told apart from a wrong code; a pending sign-up records when it started, so a repeated
-- sign-up cannot replace the password that a mailed code will activate.
CREATE TABLE attempt_budgets (
    budget_key TEXT PRIMARY KEY,
    attempts BIGINT NOT NULL CHECK (attempts >= 0),
    window_started_at_ms BIGINT NOT NULL,
    last_attempt_at_ms BIGINT NOT NULL,
    locked_until_ms BIGINT
);
CREATE INDEX attempt_budgets_last_attempt ON attempt_budgets (last_attempt_at_ms);

DROP TABLE sign_in_throttles;
DROP TABLE mail_budgets;
ALTER TABLE family_profiles DROP COLUMN pin_failed_attempts;
ALTER TABLE family_profiles DROP COLUMN pin_locked_until_ms;
ALTER TABLE otp_codes DROP COLUMN wrong_attempts;
ALTER TABLE otp_codes ADD COLUMN consumed_at_ms BIGINT;
ALTER TABLE users ADD COLUMN signed_up_at_ms BIGINT;
