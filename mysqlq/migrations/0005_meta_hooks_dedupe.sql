-- mysqlq schema, version 5: job metadata, and dedupe keys held for a window after completion.
--
-- 1. `meta`: a small JSON object (at most `mysqlq::MAX_META_BYTES`) set at enqueue (options and
--    enqueue hooks: a request id, the W3C `traceparent` of the enqueuing span) and updated by the
--    running handler (progress, checkpoints) through token-guarded writes. NULL when empty.
-- 2. `dedupe_window_us`: how long, in microseconds, the dedupe key stays taken after the job
--    completes (`EnqueueOptions::dedupe_window`). A generated column cannot read the clock, so
--    `dedupe_active` keeps a completed job's key while `dedupe_window_us` is set; an enqueue
--    that collides with a holder whose `finished_at + dedupe_window_us` has passed clears the
--    holder's `dedupe_window_us` (which frees the key) and inserts again. NULL: the key is freed
--    on completion, as before.
--
-- Adding a column that exists fails with error 1060, which the migration runner takes as "this
-- statement was applied already" (MySQL 8 has no ADD COLUMN IF NOT EXISTS); the MODIFY states
-- the full column definition, so running this file again changes nothing.

ALTER TABLE job_queue ADD COLUMN meta JSON NULL;

ALTER TABLE job_queue ADD COLUMN dedupe_window_us BIGINT UNSIGNED NULL;

ALTER TABLE job_queue
  MODIFY dedupe_active VARCHAR(191) CHARACTER SET utf8mb4 COLLATE {key_collation} GENERATED ALWAYS AS (
    CASE
      WHEN status = 'pending' AND (dedupe_until = 'finished' OR first_claimed_at IS NULL) THEN dedupe_key
      WHEN status = 'processing' AND dedupe_until = 'finished' THEN dedupe_key
      WHEN status = 'completed' AND dedupe_window_us IS NOT NULL THEN dedupe_key
    END
  ) STORED;
