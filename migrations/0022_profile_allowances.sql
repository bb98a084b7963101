-- Why: family economics (issue 36). A family profile may carry a monthly token allowance (Auth's column, NULL = no
-- cap); what each profile spends and holds is counted per allowance period in `ledger_profile_usage` (the ledger's:
-- holds, captures, voids and expiry change it under the user's account locks). A hold remembers the profile and the
-- period it counts on; a spend attributed to a profile is recorded in `ledger_profile_spends`, so `ledger verify` can
-- recompute every usage row from the holds and spends behind it.
ALTER TABLE family_profiles ADD COLUMN monthly_token_allowance BIGINT;
ALTER TABLE ledger_holds ADD COLUMN profile_id TEXT;
ALTER TABLE ledger_holds ADD COLUMN usage_period_ms BIGINT;
CREATE TABLE ledger_profile_usage (
    profile_id TEXT NOT NULL,
    period_start_ms BIGINT NOT NULL,
    user_id TEXT NOT NULL,
    used BIGINT NOT NULL DEFAULT 0,
    held BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (profile_id, period_start_ms),
    CHECK (used >= 0 AND held >= 0)
);
CREATE INDEX ledger_profile_usage_user ON ledger_profile_usage (user_id);
CREATE TABLE ledger_profile_spends (
    operation_id TEXT PRIMARY KEY,
    profile_id TEXT NOT NULL,
    period_start_ms BIGINT NOT NULL,
    user_id TEXT NOT NULL,
    amount BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL
);
CREATE INDEX ledger_profile_spends_profile ON ledger_profile_spends (profile_id, period_start_ms);
CREATE INDEX ledger_holds_profile ON ledger_holds (profile_id, usage_period_ms) WHERE profile_id IS NOT NULL;
