-- Why: an idempotency record stores what the write ended with in the ledger's own terms (`outcome_json`: its result,
-- or the ledger failure remembered in its place), and the HTTP layer renders it on every replay. Records written
-- before this migration hold the HTTP answer that was sent (`status`, `response_json`); they are replayed as they were
-- until they age out (35 days), so those two columns become optional. SQLite cannot drop NOT NULL: the table is rebuilt.
ALTER TABLE idempotency_records RENAME TO idempotency_records_before_0017;
CREATE TABLE idempotency_records (
    caller TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    request_json TEXT NOT NULL,
    status BIGINT,
    response_json TEXT,
    outcome_json TEXT,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (caller, idempotency_key),
    CHECK (outcome_json IS NOT NULL OR (status IS NOT NULL AND response_json IS NOT NULL))
);
INSERT INTO idempotency_records (caller, idempotency_key, request_json, status, response_json, created_at_ms)
    SELECT caller, idempotency_key, request_json, status, response_json, created_at_ms FROM idempotency_records_before_0017;
DROP TABLE idempotency_records_before_0017;
CREATE INDEX idempotency_records_created ON idempotency_records (created_at_ms);
