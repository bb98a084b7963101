-- Why: the monthly drip of yearly plans read `LIMIT 500` subscriptions with no order and no test of whether anything
-- was due, so with more than 500 subscriptions the same 500 rows came back every pass and the yearly subscribers
-- past them never received a month's tokens (issue 35: jobs at a million users). Each subscription now carries when
-- it is next due for the drip: 0 (due now) when written, the next month's start after the drip looked at it, NULL when
-- it is not a yearly plan the drip serves (any later write to the subscription makes it due again). The drip reads
-- only what is due, oldest first, by this index.
ALTER TABLE subscriptions ADD COLUMN next_drip_at_ms BIGINT DEFAULT 0;
CREATE INDEX subscriptions_next_drip ON subscriptions (next_drip_at_ms);
