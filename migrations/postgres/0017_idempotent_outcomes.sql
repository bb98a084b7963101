-- Why: an idempotency record stores what the write ended with in the ledger's own terms (`outcome_json`: its result,
-- or the ledger failure remembered in its place), and the HTTP layer renders it on every replay. Records written
-- before this migration hold the HTTP answer that was sent (`status`, `response_json`); they are replayed as they were
-- until they age out (35 days), so those two columns become optional.
-- `ledger_spend_once` follows: it stores the spend's result (no longer a response body the caller templated) and
-- returns a stored record as it is for the caller to replay or refuse. Its rules are unchanged; it runs four
-- statements instead of seven for a spend from one bucket (the idempotency record is claimed by its INSERT, the
-- holds and lots are checked together, and the balances, lots and transfers are written by one statement).
ALTER TABLE idempotency_records
    ADD COLUMN outcome_json TEXT,
    ALTER COLUMN status DROP NOT NULL,
    ALTER COLUMN response_json DROP NOT NULL,
    ADD CONSTRAINT idempotency_records_outcome CHECK (outcome_json IS NOT NULL OR (status IS NOT NULL AND response_json IS NOT NULL));
DROP FUNCTION ledger_spend_once(TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT);
CREATE FUNCTION ledger_spend_once(
    p_caller TEXT, p_key TEXT, p_request_json TEXT, p_user_id TEXT, p_amount BIGINT, p_reason TEXT, p_metadata TEXT,
    p_now_ms BIGINT, p_operation_id TEXT)
RETURNS TABLE (outcome TEXT, request_json TEXT, outcome_json TEXT, status BIGINT, response_json TEXT, bonus BIGINT,
               subscription BIGINT, purchased BIGINT, held BIGINT, transfers INT)
LANGUAGE plpgsql AS $$
DECLARE
    v_record RECORD;
    v_account RECORD;
    v_lot RECORD;
    v_accounts INT := 0;
    v_bonus BIGINT := 0;
    v_subscription BIGINT := 0;
    v_purchased BIGINT := 0;
    v_held BIGINT := 0;
    v_expired_holds BIGINT := 0;
    v_lapsed_lots BOOLEAN := FALSE;
    v_left BIGINT := p_amount;
    v_take BIGINT;
    v_outcome TEXT;
    v_bucket TEXT;
    v_lot_ids TEXT[] := '{}';
    v_lot_takes BIGINT[] := '{}';
    v_buckets TEXT[] := '{}';
    v_takes BIGINT[] := '{}';
    v_afters BIGINT[] := '{}';
    v_spent_bonus BIGINT := 0;
BEGIN
    -- The user's bucket accounts, locked in the fixed order every ledger operation uses.
    FOR v_account IN SELECT a.bucket, a.balance FROM ledger_accounts a WHERE a.user_id = p_user_id ORDER BY a.id FOR UPDATE LOOP
        v_accounts := v_accounts + 1;
        IF v_account.bucket = 'bonus' THEN v_bonus := v_account.balance;
        ELSIF v_account.bucket = 'subscription' THEN v_subscription := v_account.balance;
        ELSIF v_account.bucket = 'purchased' THEN v_purchased := v_account.balance;
        END IF;
    END LOOP;
    IF v_accounts < 3 THEN
        RETURN QUERY SELECT 'fallback'::TEXT, NULL::TEXT, NULL::TEXT, NULL::BIGINT, NULL::TEXT, 0::BIGINT, 0::BIGINT, 0::BIGINT, 0::BIGINT, 0;
        RETURN;
    END IF;
    -- Live holds, expired ones still to release, and bonus lots that lapsed: one statement.
    SELECT COALESCE(SUM(h.amount) FILTER (WHERE h.expires_at_ms > p_now_ms), 0), COUNT(*) FILTER (WHERE h.expires_at_ms <= p_now_ms),
        EXISTS (SELECT 1 FROM ledger_lots l WHERE l.user_id = p_user_id AND l.remaining > 0 AND l.expires_at_ms IS NOT NULL
                AND l.expires_at_ms <= p_now_ms)
        INTO v_held, v_expired_holds, v_lapsed_lots FROM ledger_holds h WHERE h.user_id = p_user_id AND h.status = 'pending';
    IF v_expired_holds > 0 OR v_lapsed_lots OR v_bonus + v_subscription + v_purchased < p_amount THEN
        RETURN QUERY SELECT 'fallback'::TEXT, NULL::TEXT, NULL::TEXT, NULL::BIGINT, NULL::TEXT, 0::BIGINT, 0::BIGINT, 0::BIGINT, 0::BIGINT, 0;
        RETURN;
    END IF;
    -- Soonest-expiring first: bonus lots (expiring ones by expiry, then the rest), then subscription, then purchased.
    -- Planned here, written below; the running balance after each transfer is the user's total then.
    IF v_bonus > 0 THEN
        FOR v_lot IN SELECT l.id, l.remaining FROM ledger_lots l WHERE l.user_id = p_user_id AND l.remaining > 0
                ORDER BY CASE WHEN l.expires_at_ms IS NULL THEN 1 ELSE 0 END, l.expires_at_ms, l.created_at_ms, l.id LIMIT 1000 LOOP
            EXIT WHEN v_left = 0;
            v_take := LEAST(v_left, v_lot.remaining);
            v_left := v_left - v_take;
            v_bonus := v_bonus - v_take;
            v_spent_bonus := v_spent_bonus + v_take;
            v_lot_ids := v_lot_ids || v_lot.id;
            v_lot_takes := v_lot_takes || v_take;
            v_buckets := v_buckets || 'bonus'::TEXT;
            v_takes := v_takes || v_take;
            v_afters := v_afters || (v_bonus + v_subscription + v_purchased);
        END LOOP;
    END IF;
    FOREACH v_bucket IN ARRAY ARRAY['subscription', 'purchased'] LOOP
        v_take := LEAST(v_left, CASE v_bucket WHEN 'subscription' THEN v_subscription ELSE v_purchased END);
        CONTINUE WHEN v_take <= 0;
        v_left := v_left - v_take;
        IF v_bucket = 'subscription' THEN v_subscription := v_subscription - v_take; ELSE v_purchased := v_purchased - v_take; END IF;
        v_buckets := v_buckets || v_bucket;
        v_takes := v_takes || v_take;
        v_afters := v_afters || (v_bonus + v_subscription + v_purchased);
    END LOOP;
    IF v_left <> 0 THEN
        RAISE EXCEPTION 'ledger_spend_once: the bonus lots of % do not add up to its bonus balance', p_user_id;
    END IF;
    -- The result in the ledger's terms (`LedgerResult`, as `IdempotencyStore` decodes it); the caller renders it.
    v_outcome := jsonb_build_object('result', jsonb_build_object('operationId', p_operation_id, 'userId', p_user_id, 'amount', p_amount,
        'balances', jsonb_build_object('bonusTokens', v_bonus, 'subscriptionTokens', v_subscription, 'purchasedTokens', v_purchased,
                                       'heldTokens', v_held)))::TEXT;
    -- The key is claimed before anything is written. Taken by this caller before (or by a concurrent request, once
    -- that one commits): nothing is written, and the stored record is returned for the caller to replay or refuse.
    INSERT INTO idempotency_records (caller, idempotency_key, request_json, outcome_json, created_at_ms)
        VALUES (p_caller, p_key, p_request_json, v_outcome, p_now_ms) ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        SELECT r.request_json, r.outcome_json, r.status, r.response_json INTO v_record FROM idempotency_records r
            WHERE r.caller = p_caller AND r.idempotency_key = p_key;
        RETURN QUERY SELECT 'stored'::TEXT, v_record.request_json, v_record.outcome_json, v_record.status, v_record.response_json,
            0::BIGINT, 0::BIGINT, 0::BIGINT, 0::BIGINT, 0;
        RETURN;
    END IF;
    -- The lots, the balances and the transfers (in allocation order), in one statement.
    WITH lots AS (
        UPDATE ledger_lots l SET remaining = l.remaining - t.take FROM unnest(v_lot_ids, v_lot_takes) AS t(id, take) WHERE l.id = t.id
    ), accounts AS (
        UPDATE ledger_accounts a SET balance = CASE a.bucket WHEN 'bonus' THEN v_bonus WHEN 'subscription' THEN v_subscription
                                                             ELSE v_purchased END
        WHERE a.user_id = p_user_id AND a.bucket = ANY (v_buckets)
    )
    INSERT INTO ledger_transfers (id, operation_id, debit_account_id, credit_account_id, amount, reason, user_id, user_amount,
                                  user_bucket, user_balance_after, hold_id, metadata, created_at_ms)
        SELECT gen_random_uuid()::TEXT, p_operation_id, 'user:' || p_user_id || ':' || t.bucket, 'system:consumption', t.take, p_reason,
               p_user_id, -t.take, t.bucket, t.after, NULL, p_metadata, p_now_ms
        FROM unnest(v_buckets, v_takes, v_afters) WITH ORDINALITY AS t(bucket, take, after, n) ORDER BY t.n;
    RETURN QUERY SELECT 'spent'::TEXT, p_request_json, v_outcome, NULL::BIGINT, NULL::TEXT, v_bonus, v_subscription, v_purchased, v_held,
        cardinality(v_buckets);
END;
$$;
