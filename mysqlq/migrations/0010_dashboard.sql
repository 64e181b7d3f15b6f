-- mysqlq schema, version 10: what the dashboard's states, search, bulk actions, queues and
-- workers pages read (`docs/dashboard.md`, plan in `docs/design/dashboard.md`).
--
-- Two existing indexes are widened instead of new ones added: their entries move exactly when
-- they moved before (status, lease; finished_at is written once), so no claim, completion or
-- retry pays one more index update. `idx_job_recover` now walks the unfinished states in due
-- order with attempts, queue and kind on the entry; `idx_job_finished` walks the finished
-- states newest first with queue and kind on the entry. The reaper's probe and `stats_leases`
-- keep their `(status, lease_expires_at)` prefix.
--
-- `claimed_at`: when the current attempt was claimed (the workers page, the job timeline).
-- `mysqlq_audit` gains a bulk action's confirmed count, state and progress time;
-- `mysqlq_worker.config` a worker's settings per queue. `mysqlq_run_minute` holds run and
-- pickup latency per minute, queue, kind and series as log-scale histogram buckets
-- (`mysqlq::latency`), `mysqlq_depth_minute` the leader's per-minute state counts,
-- `mysqlq_search_field` the payload and meta paths an operator declared searchable.
--
-- No foreign keys, as everywhere. Re-runnable: 1060/1061 mean "applied already", re-running an
-- index's DROP + ADD rebuilds it to the same definition, tables use IF NOT EXISTS.

ALTER TABLE job_queue DROP KEY idx_job_recover,
  ADD KEY idx_job_recover (status, lease_expires_at, available_at, id, attempts, queue_name, kind),
  ALGORITHM = INPLACE, LOCK = NONE;
ALTER TABLE job_queue DROP KEY idx_job_finished,
  ADD KEY idx_job_finished (status, finished_at, id, queue_name, kind),
  ALGORITHM = INPLACE, LOCK = NONE;
ALTER TABLE job_queue ADD COLUMN claimed_at DATETIME(6) NULL;

ALTER TABLE mysqlq_audit ADD COLUMN expected BIGINT UNSIGNED NULL;
ALTER TABLE mysqlq_audit ADD COLUMN state ENUM('running', 'done', 'stopped', 'failed') NULL;
ALTER TABLE mysqlq_audit ADD COLUMN progress_at DATETIME(6) NULL;

ALTER TABLE mysqlq_worker ADD COLUMN config JSON NULL;

CREATE TABLE IF NOT EXISTS mysqlq_run_minute (
  minute DATETIME NOT NULL,
  queue_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE {key_collation} NOT NULL,
  kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE {key_collation} NOT NULL,
  series ENUM('completed', 'retried', 'failed', 'cancelled', 'snoozed', 'pickup') NOT NULL,
  bucket TINYINT UNSIGNED NOT NULL,
  n BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (minute, queue_name, kind, series, bucket)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS mysqlq_depth_minute (
  minute DATETIME NOT NULL,
  queue_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE {key_collation} NOT NULL,
  state ENUM('waiting', 'ready', 'rate-limited', 'scheduled', 'retrying', 'running', 'failed') NOT NULL,
  n BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (minute, queue_name, state)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS mysqlq_search_field (
  path VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {key_collation} NOT NULL,
  column_name VARCHAR(64) NOT NULL,
  created_at DATETIME(6) NOT NULL,
  PRIMARY KEY (path)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
