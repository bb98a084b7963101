-- Why: an address change is confirmed by the session that asked for it. The code went to an address the asker chose, so
-- any other session of the account (one an attacker signed in later, with a passkey or a password reset of his own)
-- must not be able to finish it; and a change whose session was revoked is dead. Rows from before have no session and
-- can no longer be confirmed (they live at most 10 minutes; asking again makes a new one).
ALTER TABLE email_changes ADD COLUMN session_id TEXT;
