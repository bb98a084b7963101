-- Why: the operator console's books page lists the newest subscription periods (grants and rollover expiries) and sums
-- the current month's; both read this index's newest entries, never the whole table.
CREATE INDEX ledger_period_grants_created ON ledger_period_grants (created_at_ms);
