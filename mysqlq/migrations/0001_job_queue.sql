-- mysqlq schema, version 1.
--
-- `job_queue` is the table of the source article ("Can MySQL SKIP LOCKED be used as a job queue?"):
-- the same columns, types, defaults and index names, so the article's monitoring, recovery and
-- cleanup SQL runs against it unchanged. mysqlq's extensions follow the article's columns and are
-- documented in docs/schema.md. Every statement is idempotent (IF NOT EXISTS / INSERT IGNORE):
-- applying this file twice changes nothing and never drops data.
-- Valid on MySQL 8.0.1+ and MariaDB 10.6+.

CREATE TABLE IF NOT EXISTS job_queue (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  queue_name VARCHAR(64) NOT NULL DEFAULT 'default',
  payload JSON NOT NULL,

  status ENUM(
    'pending',
    'processing',
    'completed',
    'failed',
    'cancelled'
  ) NOT NULL DEFAULT 'pending',

  available_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  locked_by VARCHAR(128) NULL,
  claim_token CHAR(36) NULL,
  lease_expires_at DATETIME(6) NULL,

  attempts INT UNSIGNED NOT NULL DEFAULT 0,
  max_attempts INT UNSIGNED NOT NULL DEFAULT 5,
  last_error TEXT NULL,

  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at DATETIME(6) NOT NULL
    DEFAULT CURRENT_TIMESTAMP(6)
    ON UPDATE CURRENT_TIMESTAMP(6),

  -- mysqlq extensions (docs/schema.md)
  kind VARCHAR(128) NULL,
  priority SMALLINT NOT NULL DEFAULT 0,
  dedupe_key VARCHAR(191) NULL,
  dedupe_until ENUM('finished', 'started') NOT NULL DEFAULT 'finished',
  -- The key while it is held: 'finished' holds it while pending or processing, 'started' only
  -- until the first claim. NULL otherwise, so the unique index below is a partial index.
  dedupe_active VARCHAR(191) GENERATED ALWAYS AS (
    CASE
      WHEN status = 'pending' AND (dedupe_until = 'finished' OR first_claimed_at IS NULL) THEN dedupe_key
      WHEN status = 'processing' AND dedupe_until = 'finished' THEN dedupe_key
    END
  ) STORED,
  ordering_key VARCHAR(191) NULL,
  concurrency_key VARCHAR(191) NULL,
  concurrency_limit SMALLINT UNSIGNED NULL,
  first_claimed_at DATETIME(6) NULL,
  finished_at DATETIME(6) NULL,

  PRIMARY KEY (id),
  KEY idx_job_claim (
    queue_name,
    status,
    priority,
    available_at,
    id
  ),
  KEY idx_job_recover (
    status,
    lease_expires_at
  ),
  UNIQUE KEY uq_job_dedupe (dedupe_active),
  KEY idx_job_ordering (ordering_key, status, id),
  KEY idx_job_concurrency (concurrency_key, status),
  KEY idx_job_finished (status, finished_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- One row per queue that an operator has touched (pause/resume).
CREATE TABLE IF NOT EXISTS mysqlq_queue (
  queue_name VARCHAR(64) NOT NULL,
  paused TINYINT(1) NOT NULL DEFAULT 0,
  updated_at DATETIME(6) NOT NULL
    DEFAULT CURRENT_TIMESTAMP(6)
    ON UPDATE CURRENT_TIMESTAMP(6),
  PRIMARY KEY (queue_name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- Leader election by lease row: the reaper, pruner and scheduler run on the holder only.
CREATE TABLE IF NOT EXISTS mysqlq_leader (
  name VARCHAR(64) NOT NULL,
  leader_id VARCHAR(128) NULL,
  elected_at DATETIME(6) NULL,
  expires_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:01',
  PRIMARY KEY (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

INSERT IGNORE INTO mysqlq_leader (name) VALUES ('maintenance');

-- Per-key concurrency limits: the claim locks a key's row here (in sorted key order) before
-- counting the key's running jobs, so two claimers never both take the last slot.
CREATE TABLE IF NOT EXISTS mysqlq_concurrency (
  concurrency_key VARCHAR(191) NOT NULL,
  PRIMARY KEY (concurrency_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- Periodic jobs: one row per (schedule, tick), written in the transaction that enqueues the
-- tick's job, so each tick is enqueued once however many workers run the scheduler.
CREATE TABLE IF NOT EXISTS mysqlq_cron (
  name VARCHAR(128) NOT NULL,
  tick DATETIME NOT NULL,
  job_id BIGINT UNSIGNED NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (name, tick)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
