-- Why: a refund's clawback is an amount, and amounts are columns: the reversal of a refund gives back what
-- `clawed_tokens` says instead of parsing it out of the event's detail text ("clawed N shortfall M"). Refunds
-- recorded before this migration are backfilled from that text. (SQLite: instr; PostgreSQL: strpos.)
ALTER TABLE subscription_events ADD COLUMN clawed_tokens BIGINT;
UPDATE subscription_events SET clawed_tokens = CAST(substr(detail, 8, instr(detail, ' shortfall') - 8) AS BIGINT)
    WHERE kind = 'refund' AND detail LIKE 'clawed % shortfall %';
