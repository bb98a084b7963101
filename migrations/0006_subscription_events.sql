-- Why: the subscription state machine. Every provider event is recorded once by (provider, event id), with
-- what it did, so duplicates have no effect; the subscription remembers when its newest applied event
-- happened, so an older event that arrives late is recorded but never overwrites newer state.
ALTER TABLE subscriptions ADD COLUMN last_event_at_ms BIGINT;

CREATE TABLE subscription_events (
    provider TEXT NOT NULL,
    event_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    occurred_at_ms BIGINT NOT NULL,
    outcome TEXT NOT NULL,
    detail TEXT,
    recorded_at_ms BIGINT NOT NULL,
    PRIMARY KEY (provider, event_id)
);
CREATE INDEX subscription_events_user ON subscription_events (user_id, occurred_at_ms);
