-- Why: every transfer paid for two indexes nothing on a hot path reads. `ledger_transfers_debit` and
-- `ledger_transfers_credit` served only `ledger verify`'s sum of the holds account, which now comes from the per-account
-- sums verify computes in its one pass over the transfers anyway. Each spend's transfer insert spent about a quarter of
-- its time on them: under 32 concurrent spends on PostgreSQL the insert went from 0.21 to 0.15 ms (pg_stat_statements,
-- docs/performance.md), and `ledger_transfers_credit` kept every spend inserting the same key ('system:consumption')
-- into one leaf page. The account foreign keys stay: inserting a transfer checks its accounts by their primary key
-- (deleting or renaming an account, which nothing does, would now scan the transfers). On PostgreSQL each DROP waits
-- for statements already reading the table, such as a running `ledger verify`.
DROP INDEX ledger_transfers_debit;
DROP INDEX ledger_transfers_credit;
