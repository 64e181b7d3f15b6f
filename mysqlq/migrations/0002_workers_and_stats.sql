-- mysqlq schema, version 2: workers and per-minute statistics.
--
-- Workers keep their counters in memory and add them here every few seconds (one statement per
-- table per flush), so `mysqlq-cli stats` and the dashboard read small tables instead of
-- scanning job_queue. Rows older than a day are pruned by the leader.

CREATE TABLE IF NOT EXISTS mysqlq_worker (
  worker_id VARCHAR(128) NOT NULL,
  host VARCHAR(255) NOT NULL DEFAULT '',
  pid INT UNSIGNED NOT NULL DEFAULT 0,
  queues VARCHAR(1024) NOT NULL DEFAULT '',
  concurrency INT UNSIGNED NOT NULL DEFAULT 0,
  running INT UNSIGNED NOT NULL DEFAULT 0,
  started_at DATETIME(6) NOT NULL,
  last_seen_at DATETIME(6) NOT NULL,
  stopped_at DATETIME(6) NULL,
  PRIMARY KEY (worker_id),
  KEY idx_worker_seen (last_seen_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS mysqlq_stats_minute (
  minute DATETIME NOT NULL,
  worker_id VARCHAR(128) NOT NULL,
  claims BIGINT UNSIGNED NOT NULL DEFAULT 0,
  completions BIGINT UNSIGNED NOT NULL DEFAULT 0,
  retries BIGINT UNSIGNED NOT NULL DEFAULT 0,
  failures BIGINT UNSIGNED NOT NULL DEFAULT 0,
  snoozes BIGINT UNSIGNED NOT NULL DEFAULT 0,
  cancels BIGINT UNSIGNED NOT NULL DEFAULT 0,
  lost BIGINT UNSIGNED NOT NULL DEFAULT 0,
  polls BIGINT UNSIGNED NOT NULL DEFAULT 0,
  empty_polls BIGINT UNSIGNED NOT NULL DEFAULT 0,
  deadlocks BIGINT UNSIGNED NOT NULL DEFAULT 0,
  lock_waits BIGINT UNSIGNED NOT NULL DEFAULT 0,
  db_errors BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (minute, worker_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS mysqlq_kind_minute (
  minute DATETIME NOT NULL,
  kind VARCHAR(128) NOT NULL,
  runs BIGINT UNSIGNED NOT NULL DEFAULT 0,
  errors BIGINT UNSIGNED NOT NULL DEFAULT 0,
  total_us BIGINT UNSIGNED NOT NULL DEFAULT 0,
  max_us BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (minute, kind)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
