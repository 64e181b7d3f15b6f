-- mysqlq schema, version 3: keys compare byte for byte; defaults are UTC.
--
-- 1. Keys are identifiers (hashes, base64, S3 keys), not words: `dedupe_key`, `ordering_key`,
--    `concurrency_key` (and `mysqlq_concurrency.concurrency_key`) compared case- and
--    accent-insensitively under the table default (`utf8mb4_general_ci` / `utf8mb4_0900_ai_ci`),
--    so `video-ABC` was a duplicate of `Video-aBc` and the second job was silently not written.
--    They now use a binary collation without trailing-space padding: MariaDB
--    `utf8mb4_nopad_bin`, MySQL 8.0.17+ `utf8mb4_0900_bin` (older MySQL 8: `utf8mb4_bin`, which
--    still ignores trailing spaces). `queue_name` and `kind` get the same collation: workers and
--    the registry compare them byte for byte in Rust, so the database must too (a worker of
--    queue `email` must not claim jobs of `Email`, whose kind it may not know).
-- 2. `available_at` and `created_at` defaulted to CURRENT_TIMESTAMP(6), the *session's* local
--    time: a plain-SQL producer in a `+08:00` session scheduled its jobs 8 hours late. They now
--    default to UTC_TIMESTAMP(6) (MySQL 8.0.13+, MariaDB 10.2+); on MySQL 8.0.1–8.0.12 they
--    have no default and an INSERT must set them (docs/schema.md).
-- 3. `updated_at` defaults to UTC as well. Its ON UPDATE clause can only be CURRENT_TIMESTAMP,
--    which mysqlq's own sessions (sqlx sets time_zone '+00:00') make UTC. The other defaults
--    of that kind (`mysqlq_queue.updated_at`, `mysqlq_cron.created_at`) default to UTC too, in
--    case an operator writes those tables by hand.
--
-- `{key_collation}`, `{utc_default}` (UTC, or no default) and `{updated_default}` (UTC, or the
-- session clock where the server has no expression defaults) are filled in per server by
-- `mysqlq::store::server`. Every statement states the full column definition, so running this
-- file again changes nothing; existing rows (held dedupe keys included) are kept as they are:
-- values that were distinct under the old collation stay distinct under a binary one.

ALTER TABLE job_queue
  MODIFY queue_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE {key_collation} NOT NULL DEFAULT 'default',
  MODIFY available_at DATETIME(6) NOT NULL {utc_default},
  MODIFY created_at DATETIME(6) NOT NULL {utc_default},
  MODIFY updated_at DATETIME(6) NOT NULL {updated_default} ON UPDATE CURRENT_TIMESTAMP(6),
  MODIFY kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE {key_collation} NULL,
  MODIFY dedupe_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE {key_collation} NULL,
  MODIFY dedupe_active VARCHAR(191) CHARACTER SET utf8mb4 COLLATE {key_collation} GENERATED ALWAYS AS (
    CASE
      WHEN status = 'pending' AND (dedupe_until = 'finished' OR first_claimed_at IS NULL) THEN dedupe_key
      WHEN status = 'processing' AND dedupe_until = 'finished' THEN dedupe_key
    END
  ) STORED,
  MODIFY ordering_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE {key_collation} NULL,
  MODIFY concurrency_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE {key_collation} NULL;

ALTER TABLE mysqlq_concurrency
  MODIFY concurrency_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE {key_collation} NOT NULL;

ALTER TABLE mysqlq_queue
  MODIFY queue_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE {key_collation} NOT NULL,
  MODIFY updated_at DATETIME(6) NOT NULL {updated_default} ON UPDATE CURRENT_TIMESTAMP(6);

ALTER TABLE mysqlq_cron
  MODIFY created_at DATETIME(6) NOT NULL {updated_default};

ALTER TABLE mysqlq_kind_minute
  MODIFY kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE {key_collation} NOT NULL;
