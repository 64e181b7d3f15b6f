-- mysqlq schema, version 11: enqueue from SQL (`docs/other-languages.md`).
--
-- `CALL mysqlq_enqueue(kind, payload, options)` writes the row `mysqlq::NewJob::new(kind, queue,
-- payload, options)` writes, with the same checks and the same dedupe answers, from any client
-- and from a trigger (`AFTER INSERT ON orders FOR EACH ROW CALL mysqlq_enqueue(…)`), in the
-- caller's transaction. It returns no result set (a trigger may not): it sets the session
-- variables `@mysqlq_job_id` (the new job, or the dedupe key's holder) and `@mysqlq_enqueued`
-- (`inserted`, `duplicate` or `replaced`). Bad input is refused with SQLSTATE 45000 and a
-- message naming what was wrong; nothing is written then, and in a trigger the triggering
-- statement fails with it.
--
-- `mysqlq_enqueue_id(kind, payload, options)` is the same as a function returning the id. With
-- binary logging on, a function that writes needs `log_bin_trust_function_creators = 1` (or the
-- SUPER privilege): without it the server refuses to create it (errors 1418/1419/1227), this
-- migration goes on without it (`-- mysqlq:optional`), `doctor` says so, and every later
-- `migrate` tries again.
--
-- Templates (`ServerInfo::render_migration`, the one place the servers are told apart):
-- `{key_collation}`, `{isolation_variable}` (`transaction_isolation` on MySQL,
-- `tx_isolation` on MariaDB before 11.1), `{compact_json}` (MariaDB stores JSON text as given:
-- `JSON_COMPACT` makes the stored payload the bytes Rust's serde_json writes; MySQL stores JSON
-- in its own binary form and needs nothing).
--
-- Routines are replaced whole (DROP + CREATE): re-running this file changes nothing.

DROP PROCEDURE IF EXISTS mysqlq_enqueue;

DELIMITER //
CREATE PROCEDURE mysqlq_enqueue(
  IN p_kind TEXT CHARACTER SET utf8mb4,
  IN p_payload LONGTEXT CHARACTER SET utf8mb4,
  IN p_options LONGTEXT CHARACTER SET utf8mb4)
  MODIFIES SQL DATA
  SQL SECURITY INVOKER
  COMMENT 'mysqlq: enqueue a job from SQL (docs/other-languages.md)'
BEGIN
  DECLARE v_opts LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_payload LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_keys LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_key TEXT CHARACTER SET utf8mb4;
  DECLARE v_msg VARCHAR(512) CHARACTER SET utf8mb4;
  DECLARE v_i INT DEFAULT 0;
  DECLARE v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE {key_collation};
  DECLARE v_queue TEXT CHARACTER SET utf8mb4 COLLATE {key_collation} DEFAULT 'default';
  DECLARE v_priority BIGINT DEFAULT 0;
  DECLARE v_max_attempts BIGINT DEFAULT 5;
  DECLARE v_delay_us BIGINT DEFAULT 0;
  DECLARE v_run_at DATETIME(6) DEFAULT NULL;
  DECLARE v_dedupe TEXT CHARACTER SET utf8mb4 COLLATE {key_collation} DEFAULT NULL;
  DECLARE v_until VARCHAR(16) DEFAULT 'finished';
  DECLARE v_window_us BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_replace BOOLEAN DEFAULT FALSE;
  DECLARE v_ordering TEXT CHARACTER SET utf8mb4 COLLATE {key_collation} DEFAULT NULL;
  DECLARE v_ckey TEXT CHARACTER SET utf8mb4 COLLATE {key_collation} DEFAULT NULL;
  DECLARE v_climit BIGINT DEFAULT NULL;
  DECLARE v_meta LONGTEXT CHARACTER SET utf8mb4 DEFAULT NULL;
  DECLARE v_rkey TEXT CHARACTER SET utf8mb4 COLLATE {key_collation} DEFAULT NULL;
  DECLARE v_rlimit BIGINT DEFAULT NULL;
  DECLARE v_rperiod_ms BIGINT DEFAULT NULL;
  DECLARE v_num DOUBLE;
  DECLARE v_type VARCHAR(32);
  DECLARE v_dup BOOLEAN DEFAULT FALSE;
  DECLARE v_found BOOLEAN DEFAULT TRUE;
  DECLARE v_hid BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_hstatus VARCHAR(16) DEFAULT NULL;
  DECLARE v_id BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_tries INT DEFAULT 0;
  DECLARE v_ignore BIGINT UNSIGNED;
  DECLARE CONTINUE HANDLER FOR 1062 SET v_dup = TRUE;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = FALSE;

  SET @mysqlq_job_id = NULL, @mysqlq_enqueued = NULL;

  -- The kind: the job's stable name, as the worker's registry knows it.
  IF p_kind IS NULL OR CHAR_LENGTH(p_kind) = 0 OR CHAR_LENGTH(p_kind) > 128 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
      'mysqlq_enqueue: kind must be 1 to 128 characters (the job''s name, see `worker kinds`)';
  END IF;
  -- Local variables carry the key collation (binary), so comparing them with the columns is
  -- byte for byte and never an illegal mix of collations.
  SET v_kind = p_kind;

  -- The payload: a JSON object of the job's arguments by name, at most 1 MiB.
  IF p_payload IS NULL OR NOT JSON_VALID(p_payload) THEN
    SET v_msg = LEFT(CONCAT('mysqlq_enqueue: the payload of job `', LEFT(p_kind, 40),
      '` is not valid JSON; pass a JSON object such as JSON_OBJECT(''order_id'', 42)'), 128);
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
  END IF;
  IF JSON_TYPE(p_payload) <> 'OBJECT' THEN
    SET v_msg = LEFT(CONCAT('mysqlq_enqueue: the payload of job `', LEFT(p_kind, 40),
      '` must be a JSON object (the job''s arguments by name), not ', JSON_TYPE(p_payload)), 128);
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
  END IF;
  SET v_payload = {compact_json}(p_payload);
  IF LENGTH(v_payload) > 1048576 THEN
    SET v_msg = LEFT(CONCAT('mysqlq_enqueue: the payload of job `', LEFT(p_kind, 40), '` is ',
      LENGTH(v_payload), ' bytes of JSON, over the limit of 1048576; keep large data in your own table'), 128);
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
  END IF;

  -- The options: a JSON object (or NULL) of the names below, each checked for its type.
  SET v_opts = IFNULL(NULLIF(TRIM(p_options), ''), '{}');
  IF NOT JSON_VALID(v_opts) OR JSON_TYPE(v_opts) <> 'OBJECT' THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
      'mysqlq_enqueue: options must be a JSON object or NULL, e.g. JSON_OBJECT(''queue'', ''emails'')';
  END IF;
  SET v_keys = JSON_KEYS(v_opts);
  WHILE v_i < JSON_LENGTH(v_keys) DO
    SET v_key = JSON_UNQUOTE(JSON_EXTRACT(v_keys, CONCAT('$[', v_i, ']')));
    SET v_i = v_i + 1;
    IF v_key COLLATE utf8mb4_bin NOT IN ('queue', 'priority', 'delay_seconds', 'run_at',
        'max_attempts', 'dedupe_key', 'dedupe_scope', 'dedupe_window_seconds', 'dedupe_replace',
        'ordering_key', 'concurrency_key', 'concurrency_limit', 'meta', 'rate_key', 'rate_limit',
        'rate_period_ms') THEN
      SET v_msg = LEFT(CONCAT('mysqlq_enqueue: unknown option `', LEFT(v_key, 40),
        '` (options: docs/other-languages.md)'), 128);
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    SET v_type = JSON_TYPE(JSON_EXTRACT(v_opts, CONCAT('$."', v_key, '"')));
    IF v_type = 'NULL' THEN
      SET v_type = 'NULL';
    ELSEIF v_key IN ('queue', 'run_at', 'dedupe_key', 'dedupe_scope', 'ordering_key',
        'concurrency_key', 'rate_key') AND v_type <> 'STRING' THEN
      SET v_msg = LEFT(CONCAT('mysqlq_enqueue: option `', v_key, '` must be a string, not ', v_type), 128);
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    ELSEIF v_key IN ('priority', 'max_attempts', 'concurrency_limit', 'rate_limit', 'rate_period_ms')
        AND v_type NOT IN ('INTEGER', 'UNSIGNED INTEGER') THEN
      SET v_msg = LEFT(CONCAT('mysqlq_enqueue: option `', v_key, '` must be an integer, not ', v_type), 128);
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    ELSEIF v_key IN ('delay_seconds', 'dedupe_window_seconds')
        AND v_type NOT IN ('INTEGER', 'UNSIGNED INTEGER', 'DOUBLE', 'DECIMAL') THEN
      SET v_msg = LEFT(CONCAT('mysqlq_enqueue: option `', v_key, '` must be a number of seconds, not ', v_type), 128);
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    ELSEIF v_key = 'dedupe_replace' AND v_type <> 'BOOLEAN' THEN
      SET v_msg = LEFT(CONCAT('mysqlq_enqueue: option `dedupe_replace` must be true or false, not ', v_type), 128);
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    ELSEIF v_key = 'meta' AND v_type <> 'OBJECT' THEN
      SET v_msg = LEFT(CONCAT('mysqlq_enqueue: option `meta` must be a JSON object, not ', v_type), 128);
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
  END WHILE;

  -- Queue: 1 to 64 of letters, digits, `_`, `-`, `.`, `:` (mysqlq::queue::validate_queue_name).
  IF JSON_TYPE(JSON_EXTRACT(v_opts, '$.queue')) = 'STRING' THEN
    SET v_queue = JSON_UNQUOTE(JSON_EXTRACT(v_opts, '$.queue'));
  END IF;
  IF CHAR_LENGTH(v_queue) = 0 OR CHAR_LENGTH(v_queue) > 64
      OR NOT (v_queue COLLATE utf8mb4_bin REGEXP '^[A-Za-z0-9_.:-]+$') THEN
    SET v_msg = LEFT(CONCAT('mysqlq_enqueue: queue name `', LEFT(v_queue, 64),
      '` must be 1 to 64 characters of letters, digits, `_`, `-`, `.` or `:`'), 128);
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
  END IF;

  IF JSON_TYPE(JSON_EXTRACT(v_opts, '$.priority')) IN ('INTEGER', 'UNSIGNED INTEGER') THEN
    SET v_num = JSON_EXTRACT(v_opts, '$.priority');
    IF v_num < -32768 OR v_num > 32767 THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
        'mysqlq_enqueue: option `priority` must be -32768 to 32767 (lower runs first)';
    END IF;
    SET v_priority = v_num;
  END IF;

  IF JSON_TYPE(JSON_EXTRACT(v_opts, '$.max_attempts')) IN ('INTEGER', 'UNSIGNED INTEGER') THEN
    SET v_num = JSON_EXTRACT(v_opts, '$.max_attempts');
    IF v_num < 1 OR v_num > 4294967295 THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
        'mysqlq_enqueue: option `max_attempts` must be at least 1 (the first attempt counts)';
    END IF;
    SET v_max_attempts = v_num;
  END IF;

  -- When: `delay_seconds` from the database clock, or `run_at` in UTC; not both.
  IF JSON_TYPE(JSON_EXTRACT(v_opts, '$.delay_seconds')) <> 'NULL' AND
      JSON_TYPE(JSON_EXTRACT(v_opts, '$.run_at')) <> 'NULL' THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
      'mysqlq_enqueue: give `delay_seconds` or `run_at`, not both';
  END IF;
  IF JSON_TYPE(JSON_EXTRACT(v_opts, '$.delay_seconds')) IN ('INTEGER', 'UNSIGNED INTEGER', 'DOUBLE', 'DECIMAL') THEN
    SET v_num = JSON_EXTRACT(v_opts, '$.delay_seconds');
    IF v_num < 0 THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
        'mysqlq_enqueue: option `delay_seconds` must not be negative';
    END IF;
    SET v_delay_us = IF(v_num >= 9.2e12, 9223372036854775807, ROUND(v_num * 1000000));
  END IF;
  IF JSON_TYPE(JSON_EXTRACT(v_opts, '$.run_at')) = 'STRING' THEN
    SET v_key = JSON_UNQUOTE(JSON_EXTRACT(v_opts, '$.run_at'));
    IF NOT (v_key COLLATE utf8mb4_bin REGEXP
        '^[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]{1,6})?Z?$') THEN
      SET v_msg = LEFT(CONCAT('mysqlq_enqueue: option `run_at` `', LEFT(v_key, 40),
        '` must be a UTC time YYYY-MM-DD HH:MM:SS[.ffffff]'), 128);
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    BEGIN
      -- An impossible date (month 13) is an error in strict mode, NULL otherwise: NULL both ways.
      DECLARE CONTINUE HANDLER FOR SQLEXCEPTION SET v_run_at = NULL;
      SET v_run_at = CAST(REPLACE(REPLACE(v_key, 'T', ' '), 'Z', '') AS DATETIME(6));
    END;
    IF v_run_at IS NULL OR v_run_at < '1970-01-01 00:00:00' THEN
      SET v_msg = LEFT(CONCAT('mysqlq_enqueue: option `run_at` `', LEFT(v_key, 40),
        '` is not a time from 1970 to 9999'), 128);
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
  END IF;

  -- Keys: 1 to 191 characters, compared byte for byte.
  IF JSON_TYPE(JSON_EXTRACT(v_opts, '$.dedupe_key')) = 'STRING' THEN
    SET v_dedupe = JSON_UNQUOTE(JSON_EXTRACT(v_opts, '$.dedupe_key'));
  END IF;
  IF JSON_TYPE(JSON_EXTRACT(v_opts, '$.ordering_key')) = 'STRING' THEN
    SET v_ordering = JSON_UNQUOTE(JSON_EXTRACT(v_opts, '$.ordering_key'));
  END IF;
  IF JSON_TYPE(JSON_EXTRACT(v_opts, '$.concurrency_key')) = 'STRING' THEN
    SET v_ckey = JSON_UNQUOTE(JSON_EXTRACT(v_opts, '$.concurrency_key'));
  END IF;
  IF JSON_TYPE(JSON_EXTRACT(v_opts, '$.concurrency_limit')) IN ('INTEGER', 'UNSIGNED INTEGER') THEN
    SET v_climit = JSON_EXTRACT(v_opts, '$.concurrency_limit');
  END IF;
  IF (v_ckey IS NULL) <> (v_climit IS NULL) THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
      'mysqlq_enqueue: `concurrency_key` and `concurrency_limit` go together';
  END IF;
  IF v_climit IS NOT NULL AND (v_climit < 1 OR v_climit > 65535) THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
      'mysqlq_enqueue: option `concurrency_limit` must be 1 to 65535';
  END IF;
  IF JSON_TYPE(JSON_EXTRACT(v_opts, '$.rate_key')) = 'STRING' THEN
    SET v_rkey = JSON_UNQUOTE(JSON_EXTRACT(v_opts, '$.rate_key'));
  END IF;
  IF JSON_TYPE(JSON_EXTRACT(v_opts, '$.rate_limit')) IN ('INTEGER', 'UNSIGNED INTEGER') THEN
    SET v_rlimit = JSON_EXTRACT(v_opts, '$.rate_limit');
  END IF;
  IF JSON_TYPE(JSON_EXTRACT(v_opts, '$.rate_period_ms')) IN ('INTEGER', 'UNSIGNED INTEGER') THEN
    SET v_rperiod_ms = JSON_EXTRACT(v_opts, '$.rate_period_ms');
  END IF;
  IF v_rlimit IS NULL AND (v_rkey IS NOT NULL OR v_rperiod_ms IS NOT NULL) THEN
    SET v_msg = LEFT(CONCAT('mysqlq_enqueue: `rate_key`/`rate_period_ms` need `rate_limit` (starts per period) for job `',
      LEFT(p_kind, 40), '`'), 128);
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
  END IF;
  IF v_rlimit IS NOT NULL THEN
    IF v_rlimit < 1 OR v_rlimit > 1000000 THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
        'mysqlq_enqueue: option `rate_limit` must be 1 to 1000000 starts per period';
    END IF;
    SET v_rperiod_ms = IFNULL(v_rperiod_ms, 1000);
    IF v_rperiod_ms < 10 OR v_rperiod_ms > 86400000 THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
        'mysqlq_enqueue: option `rate_period_ms` must be 10 to 86400000 (10 ms to 1 day)';
    END IF;
    SET v_rkey = IFNULL(v_rkey, CONCAT('kind:', v_kind));
  END IF;
  SET v_i = 0;
  WHILE v_i < 4 DO
    SET v_key = ELT(v_i + 1, v_dedupe, v_ordering, v_ckey, v_rkey);
    IF v_key IS NOT NULL AND (CHAR_LENGTH(v_key) = 0 OR CHAR_LENGTH(v_key) > 191) THEN
      SET v_msg = LEFT(CONCAT('mysqlq_enqueue: ', ELT(v_i + 1, 'dedupe', 'ordering', 'concurrency', 'rate'),
        ' key `', LEFT(v_key, 40), '` must be 1 to 191 characters long'), 128);
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    SET v_i = v_i + 1;
  END WHILE;

  -- Dedupe options (NewJob's checks, in its order).
  IF JSON_TYPE(JSON_EXTRACT(v_opts, '$.dedupe_scope')) = 'STRING' THEN
    SET v_until = JSON_UNQUOTE(JSON_EXTRACT(v_opts, '$.dedupe_scope'));
    IF v_until COLLATE utf8mb4_bin NOT IN ('finished', 'started') THEN
      SET v_msg = LEFT(CONCAT('mysqlq_enqueue: option `dedupe_scope` `', LEFT(v_until, 40),
        '` must be `finished` or `started`'), 128);
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
  END IF;
  IF JSON_TYPE(JSON_EXTRACT(v_opts, '$.dedupe_window_seconds')) IN ('INTEGER', 'UNSIGNED INTEGER', 'DOUBLE', 'DECIMAL') THEN
    SET v_num = JSON_EXTRACT(v_opts, '$.dedupe_window_seconds');
    IF v_num < 0 THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
        'mysqlq_enqueue: option `dedupe_window_seconds` must not be negative';
    END IF;
    SET v_window_us = IF(v_num >= 1.8e13, 18446744073709551615, ROUND(v_num * 1000000));
  END IF;
  SET v_replace = JSON_TYPE(JSON_EXTRACT(v_opts, '$.dedupe_replace')) = 'BOOLEAN'
    AND JSON_UNQUOTE(JSON_EXTRACT(v_opts, '$.dedupe_replace')) = 'true';
  IF v_window_us IS NOT NULL AND v_until = 'started' THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
      'mysqlq_enqueue: a `dedupe_window_seconds` after completion needs `dedupe_scope` `finished`';
  END IF;
  IF (v_window_us IS NOT NULL OR v_replace) AND v_dedupe IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
      'mysqlq_enqueue: `dedupe_window_seconds` and `dedupe_replace` need a `dedupe_key`';
  END IF;

  -- Meta: a JSON object of at most 16 KiB; an empty one is none.
  IF JSON_TYPE(JSON_EXTRACT(v_opts, '$.meta')) = 'OBJECT' AND JSON_LENGTH(v_opts, '$.meta') > 0 THEN
    SET v_meta = {compact_json}(JSON_EXTRACT(v_opts, '$.meta'));
    IF LENGTH(v_meta) > 16384 THEN
      SET v_msg = LEFT(CONCAT('mysqlq_enqueue: the meta of job `', LEFT(p_kind, 40), '` is ',
        LENGTH(v_meta), ' bytes of JSON, over the limit of 16384'), 128);
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
  END IF;

  -- A rate key's bucket, which the claim reads (store::rate::buckets_ensure).
  IF v_rkey IS NOT NULL THEN
    SET v_found = TRUE;
    SELECT 1 INTO v_ignore FROM mysqlq_rate_bucket WHERE queue_name = v_queue AND rate_key = v_rkey;
    IF NOT v_found THEN
      INSERT IGNORE INTO mysqlq_rate_bucket (queue_name, rate_key, rate_limit, rate_period_us)
        VALUES (v_queue, v_rkey, v_rlimit, v_rperiod_ms * 1000);
    END IF;
  END IF;

  -- A held key, read without a lock when this session reads the latest committed rows (READ
  -- COMMITTED): the duplicate is answered without the INSERT's shared lock on the holder
  -- (store::insert::job_dedupe_holder_current).
  IF v_dedupe IS NOT NULL AND @@session.{isolation_variable} = 'READ-COMMITTED' THEN
    SET v_found = TRUE;
    SELECT id, CAST(status AS CHAR) INTO v_hid, v_hstatus FROM job_queue
      WHERE dedupe_active = v_dedupe AND status <> 'completed';
    IF NOT v_found THEN
      SET v_hid = NULL, v_hstatus = NULL;
    END IF;
  END IF;

  -- The INSERT; on a held dedupe key (1062) the holder decides (store::insert::on_duplicate):
  -- a completed holder past its window frees the key and the INSERT is tried again.
  WHILE v_hid IS NULL AND v_id IS NULL AND v_tries < 5 DO
    SET v_tries = v_tries + 1, v_dup = FALSE;
    INSERT INTO job_queue (queue_name, kind, payload, priority, max_attempts, available_at,
        dedupe_key, dedupe_until, ordering_key, concurrency_key, concurrency_limit, meta,
        dedupe_window_us, rate_key, rate_limit, rate_period_us, status, created_at)
      VALUES (v_queue, v_kind, v_payload, v_priority, v_max_attempts,
        IFNULL(v_run_at, UTC_TIMESTAMP(6) + INTERVAL LEAST(v_delay_us,
          TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), '9999-12-31 23:59:59')) MICROSECOND),
        v_dedupe, v_until, v_ordering, v_ckey, v_climit, v_meta, v_window_us, v_rkey, v_rlimit,
        v_rperiod_ms * 1000, 'pending', UTC_TIMESTAMP(6));
    IF NOT v_dup THEN
      SET v_id = LAST_INSERT_ID();
    ELSEIF v_dedupe IS NULL THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
        'mysqlq_enqueue: the INSERT hit a duplicate key without a dedupe key';
    ELSE
      SET v_found = TRUE;
      SELECT id, CAST(status AS CHAR) INTO v_hid, v_hstatus FROM job_queue WHERE dedupe_active = v_dedupe;
      IF NOT v_found THEN
        SET v_found = TRUE;
        SELECT id, CAST(status AS CHAR) INTO v_hid, v_hstatus FROM job_queue
          WHERE dedupe_active = v_dedupe LOCK IN SHARE MODE;
      END IF;
      IF NOT v_found THEN
        SET v_hid = NULL, v_hstatus = NULL;
      ELSEIF v_hstatus = 'completed' THEN
        UPDATE job_queue SET dedupe_window_us = NULL
          WHERE dedupe_active = v_dedupe AND status = 'completed' AND finished_at IS NOT NULL
            AND finished_at + INTERVAL dedupe_window_us MICROSECOND <= UTC_TIMESTAMP(6);
        SET v_hid = NULL, v_hstatus = NULL;
        IF ROW_COUNT() = 0 THEN
          SET v_found = TRUE;
          SELECT id, CAST(status AS CHAR) INTO v_hid, v_hstatus FROM job_queue
            WHERE dedupe_active = v_dedupe LOCK IN SHARE MODE;
          IF NOT v_found THEN
            SET v_hid = NULL, v_hstatus = NULL;
          END IF;
        END IF;
      END IF;
    END IF;
  END WHILE;

  IF v_id IS NOT NULL THEN
    SET @mysqlq_job_id = v_id, @mysqlq_enqueued = 'inserted';
  ELSEIF v_hid IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
      'mysqlq_enqueue: the dedupe key kept changing hands while enqueueing; try again';
  ELSE
    -- Replace mode: a pending holder of the same kind (no workflow step) takes this job's
    -- payload, run time, priority and meta (store::insert::job_dedupe_replace).
    SET @mysqlq_job_id = v_hid, @mysqlq_enqueued = 'duplicate';
    IF v_replace THEN
      SET v_ignore = LAST_INSERT_ID(0);
      IF v_meta IS NULL THEN
        UPDATE job_queue SET payload = v_payload, priority = v_priority,
          available_at = IFNULL(v_run_at, UTC_TIMESTAMP(6) + INTERVAL LEAST(v_delay_us,
            TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), '9999-12-31 23:59:59')) MICROSECOND),
          id = LAST_INSERT_ID(id)
          WHERE dedupe_active = v_dedupe AND status = 'pending' AND kind <=> v_kind
            AND workflow_id IS NULL;
      ELSE
        UPDATE job_queue SET payload = v_payload, priority = v_priority,
          available_at = IFNULL(v_run_at, UTC_TIMESTAMP(6) + INTERVAL LEAST(v_delay_us,
            TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), '9999-12-31 23:59:59')) MICROSECOND),
          meta = v_meta, id = LAST_INSERT_ID(id)
          WHERE dedupe_active = v_dedupe AND status = 'pending' AND kind <=> v_kind
            AND workflow_id IS NULL;
      END IF;
      IF LAST_INSERT_ID() > 0 THEN
        SET @mysqlq_job_id = LAST_INSERT_ID(), @mysqlq_enqueued = 'replaced';
      END IF;
    END IF;
  END IF;
END//
DELIMITER ;

DROP FUNCTION IF EXISTS mysqlq_enqueue_id;

-- mysqlq:optional
DELIMITER //
CREATE FUNCTION mysqlq_enqueue_id(
  p_kind TEXT CHARACTER SET utf8mb4,
  p_payload LONGTEXT CHARACTER SET utf8mb4,
  p_options LONGTEXT CHARACTER SET utf8mb4)
  RETURNS BIGINT UNSIGNED
  NOT DETERMINISTIC
  MODIFIES SQL DATA
  SQL SECURITY INVOKER
  COMMENT 'mysqlq: mysqlq_enqueue as a function returning the job id (docs/other-languages.md)'
BEGIN
  CALL mysqlq_enqueue(p_kind, p_payload, p_options);
  RETURN @mysqlq_job_id;
END//
DELIMITER ;
