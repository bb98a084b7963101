-- Why: files of stickers that were deleted (by their owner, by an erasure, or an upload that failed after its files
-- were stored) were queued for removal in the process's memory, so a process stopped before its next sweep left them
-- behind for good, an erased account's images included. The queue is now a table, written in the transaction that
-- deletes the rows, and the sweeper removes each file once nothing references it (docs/security.md, Erasure).
CREATE TABLE sticker_file_removals (
    blob_key TEXT PRIMARY KEY,
    queued_at_ms BIGINT NOT NULL
);
CREATE INDEX sticker_file_removals_due ON sticker_file_removals (queued_at_ms);
