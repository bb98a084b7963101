-- Why: an idempotency record stores what the write ended with in the ledger's own terms (`outcome_json`: its result,
-- or the ledger failure remembered in its place), and the HTTP layer renders it on every replay. Records written
-- before this migration hold the HTTP answer that was sent (`status`, `response_json`); they are replayed as they were
-- until they age out (35 days), so those two columns become optional.
-- `ledger_spend_once` follows: it stores the spend's result (no longer a response body the caller templated) and
-- returns a stored record as it is for the caller to replay or refuse. Its rules and statements are unchanged.
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
    v_left BIGINT := p_amount;
    v_take BIGINT;
    v_transfers INT := 0;
    v_outcome TEXT;
    v_bucket TEXT;
BEGIN
    -- The same key seen before (this caller): the caller replays it or reports a conflict.
    SELECT r.request_json, r.outcome_json, r.status, r.response_json INTO v_record FROM idempotency_records r
        WHERE r.caller = p_caller AND r.idempotency_key = p_key FOR UPDATE;
    IF FOUND THEN
        RETURN QUERY SELECT 'stored'::TEXT, v_record.request_json, v_record.outcome_json, v_record.status, v_record.response_json,
            0::BIGINT, 0::BIGINT, 0::BIGINT, 0::BIGINT, 0;
        RETURN;
    END IF;
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
    SELECT COALESCE(SUM(h.amount) FILTER (WHERE h.expires_at_ms > p_now_ms), 0), COUNT(*) FILTER (WHERE h.expires_at_ms <= p_now_ms)
        INTO v_held, v_expired_holds FROM ledger_holds h WHERE h.user_id = p_user_id AND h.status = 'pending';
    IF v_expired_holds > 0
        OR EXISTS (SELECT 1 FROM ledger_lots l WHERE l.user_id = p_user_id AND l.remaining > 0 AND l.expires_at_ms IS NOT NULL
                   AND l.expires_at_ms <= p_now_ms)
        OR v_bonus + v_subscription + v_purchased < p_amount THEN
        RETURN QUERY SELECT 'fallback'::TEXT, NULL::TEXT, NULL::TEXT, NULL::BIGINT, NULL::TEXT, 0::BIGINT, 0::BIGINT, 0::BIGINT, 0::BIGINT, 0;
        RETURN;
    END IF;
    -- Soonest-expiring first: bonus lots (expiring ones by expiry, then the rest), then subscription, then purchased.
    IF v_bonus > 0 THEN
        FOR v_lot IN SELECT l.id, l.remaining FROM ledger_lots l WHERE l.user_id = p_user_id AND l.remaining > 0
                ORDER BY CASE WHEN l.expires_at_ms IS NULL THEN 1 ELSE 0 END, l.expires_at_ms, l.created_at_ms, l.id LIMIT 1000 LOOP
            EXIT WHEN v_left = 0;
            v_take := LEAST(v_left, v_lot.remaining);
            v_left := v_left - v_take;
            v_bonus := v_bonus - v_take;
            UPDATE ledger_lots SET remaining = remaining - v_take WHERE id = v_lot.id;
            UPDATE ledger_accounts SET balance = balance - v_take WHERE id = 'user:' || p_user_id || ':bonus';
            INSERT INTO ledger_transfers (id, operation_id, debit_account_id, credit_account_id, amount, reason, user_id, user_amount,
                                          user_bucket, user_balance_after, hold_id, metadata, created_at_ms)
                VALUES (gen_random_uuid()::TEXT, p_operation_id, 'user:' || p_user_id || ':bonus', 'system:consumption', v_take, p_reason,
                        p_user_id, -v_take, 'bonus', v_bonus + v_subscription + v_purchased, NULL, p_metadata, p_now_ms);
            v_transfers := v_transfers + 1;
        END LOOP;
    END IF;
    FOREACH v_bucket IN ARRAY ARRAY['subscription', 'purchased'] LOOP
        v_take := LEAST(v_left, CASE v_bucket WHEN 'subscription' THEN v_subscription ELSE v_purchased END);
        CONTINUE WHEN v_take <= 0;
        v_left := v_left - v_take;
        IF v_bucket = 'subscription' THEN v_subscription := v_subscription - v_take; ELSE v_purchased := v_purchased - v_take; END IF;
        UPDATE ledger_accounts SET balance = balance - v_take WHERE id = 'user:' || p_user_id || ':' || v_bucket;
        INSERT INTO ledger_transfers (id, operation_id, debit_account_id, credit_account_id, amount, reason, user_id, user_amount,
                                      user_bucket, user_balance_after, hold_id, metadata, created_at_ms)
            VALUES (gen_random_uuid()::TEXT, p_operation_id, 'user:' || p_user_id || ':' || v_bucket, 'system:consumption', v_take, p_reason,
                    p_user_id, -v_take, v_bucket, v_bonus + v_subscription + v_purchased, NULL, p_metadata, p_now_ms);
        v_transfers := v_transfers + 1;
    END LOOP;
    IF v_left <> 0 THEN
        RAISE EXCEPTION 'ledger_spend_once: the bonus lots of % do not add up to its bonus balance', p_user_id;
    END IF;
    -- The result in the ledger's terms (`LedgerResult`, as `IdempotencyStore` decodes it); the caller renders it.
    -- The result in the ledger's terms (`LedgerResult`, as `IdempotencyStore` decodes it); the caller renders it.
    v_outcome := format('{"result":{"amount":%s,"balances":{"bonusTokens":%s,"heldTokens":%s,"purchasedTokens":%s,"subscriptionTokens":%s},"operationId":%s,"userId":%s}}',
        p_amount, v_bonus, v_held, v_purchased, v_subscription, to_json(p_operation_id)::TEXT, to_json(p_user_id)::TEXT);
    -- A concurrent request with the same key that committed first makes this a unique violation: the whole
    -- statement rolls back and the caller retries, finding the stored record.
    INSERT INTO idempotency_records (caller, idempotency_key, request_json, outcome_json, created_at_ms)
        VALUES (p_caller, p_key, p_request_json, v_outcome, p_now_ms);
    RETURN QUERY SELECT 'spent'::TEXT, p_request_json, v_outcome, NULL::BIGINT, NULL::TEXT, v_bonus, v_subscription, v_purchased, v_held,
        v_transfers;
END;
$$;
