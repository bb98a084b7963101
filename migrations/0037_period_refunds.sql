-- Why: a refund named no period. It clawed back whatever period was current when it arrived (a refund of last month's
-- payment took this month's tokens), a refund older than the account's newest event was lost as stale, and a refund
-- reversal gave back the latest refund's tokens, as often as it was sent under new ids (a charge refund and its dispute
-- clawed twice). Each period's months now record their refund: `refunded` once, `reversed` once (also when the reversal
-- arrives first), what the refund took, and which dispute took it (a won dispute gives back only what it took, never
-- what a refund took). `refunded_early`: the refund came before the period's grant, which then grants nothing.
-- A pack's `disputed_tokens` and `disputed_shortfall`: what a dispute's withdrawal took of it and could not take, both
-- undone when the dispute is won.
ALTER TABLE ledger_period_grants ADD COLUMN refund TEXT NOT NULL DEFAULT 'none'
    CHECK (refund IN ('none', 'refunded', 'refunded_early', 'reversed'));
ALTER TABLE ledger_period_grants ADD COLUMN clawed BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ledger_period_grants ADD COLUMN refunded_by TEXT;
ALTER TABLE billing_grants ADD COLUMN disputed_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE billing_grants ADD COLUMN disputed_shortfall BIGINT NOT NULL DEFAULT 0;
-- Whether an applied event changed the subscription's state (a refund of another period, or an earlier period's tokens,
-- did not): a late refund reversal restores access unless a newer one did.
ALTER TABLE subscription_events ADD COLUMN orders_state BOOLEAN NOT NULL DEFAULT TRUE;
-- Refunds applied before this migration clawed the period current then and expired the subscription. Where that is
-- still the account's state (expired, the latest applied refund neither reversed nor followed by a new period), the
-- current period and its months are marked refunded, what the refund took on the period's own row, so a reversal gives
-- it back and a dispute of the same payment takes nothing more. Older refunds cannot be placed and stay unmarked.
UPDATE ledger_period_grants SET refund = 'refunded', clawed = CASE WHEN period_key LIKE '%:month:%' THEN 0 ELSE COALESCE((
    SELECT e.clawed_tokens FROM subscription_events e
    WHERE e.user_id = ledger_period_grants.user_id AND e.kind = 'refund' AND e.outcome = 'applied'
    ORDER BY e.occurred_at_ms DESC LIMIT 1), 0) END
WHERE EXISTS (
    SELECT 1 FROM subscriptions s
    WHERE s.user_id = ledger_period_grants.user_id AND s.status = 'expired'
    AND (ledger_period_grants.period_key = 'period:' || s.current_period_start_ms
        OR ledger_period_grants.period_key LIKE 'period:' || s.current_period_start_ms || ':month:%')
    AND EXISTS (
        SELECT 1 FROM subscription_events r
        WHERE r.user_id = s.user_id AND r.kind = 'refund' AND r.outcome = 'applied'
        AND NOT EXISTS (
            SELECT 1 FROM subscription_events later
            WHERE later.user_id = s.user_id AND later.outcome = 'applied' AND later.occurred_at_ms > r.occurred_at_ms
            AND later.kind IN ('reverse_refund', 'start', 'renew', 'change_plan_now'))));
