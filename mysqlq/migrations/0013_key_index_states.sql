-- mysqlq schema, version 13: the key indexes stop moving for jobs without the key (issue 34).
--
-- `idx_job_ordering`, `idx_job_concurrency` and `idx_job_workflow` had `status` in their key,
-- so every claim and every completion rewrote their entries (in InnoDB a delete-mark and an
-- insert, purged later) for every job, also the many that have no ordering key, concurrency
-- key or workflow: 3 of the 7 index entries a status change writes, measured at 16% of the
-- server's CPU per drained job. They now key on a stored generated column that is the job's
-- status when it has the key and NULL otherwise: a job without the key keeps one entry, NULL
-- in every state, which no status change touches (the way `dedupe_active` already works for
-- `uq_job_dedupe`). For a job with the key, the column is its status, so every query that
-- reads these indexes names the column instead of `status` (`ordering_status = 'processing'`)
-- and reads exactly the entries it read before.
--
-- Adding a stored column copies the table (its rows get the new column); run it when the table
-- is small or the queue can pause for the copy. Re-runnable: 1060 (the columns exist) means
-- "applied already", and re-running an index's DROP + ADD rebuilds it to the same definition.

ALTER TABLE job_queue
  ADD COLUMN ordering_status ENUM('pending', 'processing', 'completed', 'failed', 'cancelled', 'waiting')
    GENERATED ALWAYS AS (CASE WHEN ordering_key IS NOT NULL THEN status END) STORED,
  ADD COLUMN concurrency_status ENUM('pending', 'processing', 'completed', 'failed', 'cancelled', 'waiting')
    GENERATED ALWAYS AS (CASE WHEN concurrency_key IS NOT NULL THEN status END) STORED,
  ADD COLUMN workflow_status ENUM('pending', 'processing', 'completed', 'failed', 'cancelled', 'waiting')
    GENERATED ALWAYS AS (CASE WHEN workflow_id IS NOT NULL THEN status END) STORED;

ALTER TABLE job_queue
  DROP KEY idx_job_ordering, ADD KEY idx_job_ordering (ordering_key, ordering_status, id),
  DROP KEY idx_job_concurrency, ADD KEY idx_job_concurrency (concurrency_key, concurrency_status),
  DROP KEY idx_job_workflow, ADD KEY idx_job_workflow (workflow_id, workflow_status);
