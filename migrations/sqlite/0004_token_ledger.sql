-- Why: the double-entry token ledger. Accounts: system accounts (issuance, consumption, expired, clawback,
-- holds) whose balances are derived from transfers (never a hot row every transfer must lock), and one
-- account per user bucket (bonus, subscription, purchased) with a maintained balance that never goes below
-- zero. A hold is an ordinary transfer into the holds account; capture and void move it on, so available
-- balances are always the posted balances. Transfers are append-only. Bonus grants are lots with an optional
-- expiry (spent soonest-expiring first). Idempotency records replay stored results per caller and key; period
-- grants make each subscription period's rollover happen once; job leases let one node run a background job.
CREATE TABLE ledger_accounts (
    id TEXT PRIMARY KEY,
    user_id TEXT,
    bucket TEXT NOT NULL CHECK (bucket IN ('issuance', 'consumption', 'expired', 'clawback', 'holds', 'bonus', 'subscription', 'purchased')),
    balance BIGINT NOT NULL DEFAULT 0,
    created_at_ms BIGINT NOT NULL,
    CHECK (user_id IS NULL OR balance >= 0)
);
CREATE UNIQUE INDEX ledger_accounts_user_bucket ON ledger_accounts (user_id, bucket);

CREATE TABLE ledger_transfers (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    operation_id TEXT NOT NULL,
    debit_account_id TEXT NOT NULL REFERENCES ledger_accounts (id),
    credit_account_id TEXT NOT NULL REFERENCES ledger_accounts (id),
    amount BIGINT NOT NULL CHECK (amount > 0),
    reason TEXT NOT NULL,
    user_id TEXT,
    user_amount BIGINT NOT NULL,
    user_bucket TEXT,
    user_balance_after BIGINT,
    hold_id TEXT,
    metadata TEXT,
    created_at_ms BIGINT NOT NULL,
    CHECK (debit_account_id <> credit_account_id)
);
CREATE INDEX ledger_transfers_user ON ledger_transfers (user_id, seq);
CREATE INDEX ledger_transfers_debit ON ledger_transfers (debit_account_id);
CREATE INDEX ledger_transfers_credit ON ledger_transfers (credit_account_id);

CREATE TABLE ledger_lots (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    granted BIGINT NOT NULL CHECK (granted > 0),
    remaining BIGINT NOT NULL CHECK (remaining >= 0),
    expires_at_ms BIGINT,
    created_at_ms BIGINT NOT NULL
);
CREATE INDEX ledger_lots_user ON ledger_lots (user_id, remaining);
CREATE INDEX ledger_lots_expiry ON ledger_lots (expires_at_ms);

CREATE TABLE ledger_holds (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    amount BIGINT NOT NULL CHECK (amount > 0),
    captured_amount BIGINT,
    status TEXT NOT NULL CHECK (status IN ('pending', 'captured', 'voided', 'expired')),
    reason TEXT NOT NULL,
    metadata TEXT,
    expires_at_ms BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    resolved_at_ms BIGINT
);
CREATE INDEX ledger_holds_pending ON ledger_holds (status, expires_at_ms);
CREATE INDEX ledger_holds_user ON ledger_holds (user_id, status);

CREATE TABLE ledger_hold_parts (
    hold_id TEXT NOT NULL REFERENCES ledger_holds (id),
    part BIGINT NOT NULL,
    bucket TEXT NOT NULL,
    lot_id TEXT,
    amount BIGINT NOT NULL CHECK (amount > 0),
    PRIMARY KEY (hold_id, part)
);

CREATE TABLE idempotency_records (
    caller TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    request_json TEXT NOT NULL,
    status BIGINT NOT NULL,
    response_json TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (caller, idempotency_key)
);
CREATE INDEX idempotency_records_created ON idempotency_records (created_at_ms);

CREATE TABLE ledger_period_grants (
    user_id TEXT NOT NULL,
    period_key TEXT NOT NULL,
    plan_id TEXT NOT NULL,
    granted BIGINT NOT NULL,
    expired BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (user_id, period_key)
);

CREATE TABLE job_leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at_ms BIGINT NOT NULL
);

INSERT INTO ledger_accounts (id, user_id, bucket, balance, created_at_ms) VALUES
    ('system:issuance', NULL, 'issuance', 0, 0),
    ('system:consumption', NULL, 'consumption', 0, 0),
    ('system:expired', NULL, 'expired', 0, 0),
    ('system:clawback', NULL, 'clawback', 0, 0),
    ('system:holds', NULL, 'holds', 0, 0);
