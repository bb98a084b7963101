-- Why: ledger transfers are append-only on SQLite too (PostgreSQL has had the same trigger since 0004): a
-- correction is a new, compensating transfer, never an edited or deleted one.
CREATE TRIGGER ledger_transfers_no_update BEFORE UPDATE ON ledger_transfers
BEGIN
    SELECT RAISE(ABORT, 'ledger_transfers is append-only: record a correcting transfer instead');
END;
CREATE TRIGGER ledger_transfers_no_delete BEFORE DELETE ON ledger_transfers
BEGIN
    SELECT RAISE(ABORT, 'ledger_transfers is append-only: record a correcting transfer instead');
END;
