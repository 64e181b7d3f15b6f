-- mysqlq schema, version 9: rate limits (`docs/rate-limits.md`).
--
-- A job with a rate key carries its limit on the row (`rate_key`, `rate_limit` starts per
-- `rate_period_us`), as a concurrency key does, so any worker decides without knowing the kind.
-- `idx_job_rate` gives every lane its own range in claim order: the plain lane is
-- `(queue, 'pending', NULL)`, a key's lane `(queue, 'pending', key)`; a backlog of one key is
-- never read by a claim of another key or of the plain lane.
--
-- `mysqlq_rate_bucket`: one row per `(queue, key)` (`rate_key = ''`: the queue as a whole).
-- `starts` is the sliding-window log of recent admissions (at most 64 `(time, count)` entries,
-- written only by `rate::decide` inside the claim transaction that locked the row with
-- `FOR UPDATE SKIP LOCKED`); `open_at` is the first moment the bucket may admit again, so full
-- keys are never read by a claim. `decisions` is written by every decision (two Galera nodes
-- deciding one key conflict at certification instead of both admitting).
-- `mysqlq_rate_hold`: `JobError::rate_limited(retry_after)` holds a key (or the queue, `''`)
-- until `held_until`; insert-only, one row per job, so writing it never waits for a claim.
-- `mysqlq_queue` gains the queue-wide limits every worker obeys.
--
-- No foreign keys, as for `mysqlq_job_attempt`. Re-runnable: 1060/1061 mean "applied already";
-- the MODIFY states the full definition.

ALTER TABLE job_queue ADD COLUMN rate_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE {key_collation} NULL;
ALTER TABLE job_queue ADD COLUMN rate_limit INT UNSIGNED NULL;
ALTER TABLE job_queue ADD COLUMN rate_period_us BIGINT UNSIGNED NULL;

ALTER TABLE job_queue ADD KEY idx_job_rate (queue_name, status, rate_key, priority, available_at, id);

ALTER TABLE mysqlq_queue ADD COLUMN rate_limit INT UNSIGNED NULL;
ALTER TABLE mysqlq_queue ADD COLUMN rate_period_us BIGINT UNSIGNED NULL;
ALTER TABLE mysqlq_queue ADD COLUMN global_limit INT UNSIGNED NULL;

ALTER TABLE mysqlq_job_attempt MODIFY outcome ENUM('retry', 'snooze', 'fail', 'cancel', 'rate_limited') NOT NULL;

CREATE TABLE IF NOT EXISTS mysqlq_rate_bucket (
  queue_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE {key_collation} NOT NULL,
  rate_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE {key_collation} NOT NULL,
  starts VARBINARY(1024) NOT NULL DEFAULT '',
  rate_limit INT UNSIGNED NULL,
  rate_period_us BIGINT UNSIGNED NULL,
  slack_us INT UNSIGNED NOT NULL DEFAULT 0,
  open_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:01',
  decided_at DATETIME(6) NULL,
  decisions BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (queue_name, rate_key),
  KEY idx_rate_open (queue_name, open_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS mysqlq_rate_hold (
  queue_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE {key_collation} NOT NULL,
  rate_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE {key_collation} NOT NULL,
  job_id BIGINT UNSIGNED NOT NULL,
  held_until DATETIME(6) NOT NULL,
  PRIMARY KEY (queue_name, rate_key, job_id),
  KEY idx_rate_hold_until (held_until)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
