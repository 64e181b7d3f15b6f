-- mysqlq schema, version 4: who cancelled a job, and the history of its failed attempts.
--
-- 1. `cancelled_at`, `cancelled_by`, `cancel_reason`: set when an operator cancels a job
--    (`mysqlq::admin::Admin::cancel`, `mysqlq-cli cancel`, the dashboard); NULL when the job's
--    own handler decided to cancel (or the job was never cancelled). A worker whose job is
--    cancelled while it runs tells "cancelled by an operator" from "lease lost" by these columns.
--    Each column is added by a statement of its own: adding a column at the end of a table is
--    instant on MySQL 8.0.12+ and MariaDB 10.3+, and the migration runner treats "duplicate
--    column" (1060) as already applied, so running this file again changes nothing (MySQL has no
--    `ADD COLUMN IF NOT EXISTS`).
-- 2. `mysqlq_job_attempt`: one row per attempt that ended in a retry, snooze, failure or
--    cancellation (never for completions), written in the same transaction as the job's
--    outcome (by the reaper for an attempt whose worker died: `started_at` NULL, unknown); only the newest N per job are kept (the worker's `attempt_history`). mysqlq deletes
--    a job's rows with the job (pruner, `purge`, `failed discard`, `delete`). There is no
--    foreign key on purpose: `job_queue` stays free of constraints that block `TRUNCATE`,
--    `DROP TABLE` and online schema-change tools (gh-ost refuses tables with foreign keys).
--    Rows of jobs deleted by hand-written SQL stay behind (docs/schema.md shows the cleanup).

ALTER TABLE job_queue ADD COLUMN cancelled_at DATETIME(6) NULL;

ALTER TABLE job_queue ADD COLUMN cancelled_by VARCHAR(128) NULL;

ALTER TABLE job_queue ADD COLUMN cancel_reason VARCHAR(1024) NULL;

CREATE TABLE IF NOT EXISTS mysqlq_job_attempt (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  job_id BIGINT UNSIGNED NOT NULL,
  attempt INT UNSIGNED NOT NULL,
  outcome ENUM('retry', 'snooze', 'fail', 'cancel') NOT NULL,
  worker VARCHAR(128) NULL,
  started_at DATETIME(6) NULL,
  finished_at DATETIME(6) NOT NULL,
  error TEXT NOT NULL,
  error_bytes INT UNSIGNED NOT NULL,
  PRIMARY KEY (id),
  KEY idx_attempt_job (job_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
