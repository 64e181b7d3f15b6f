-- mysqlq schema, version 12: completions that delete their rows (`WorkerBuilder::delete_completed`,
-- `work --delete-completed`; `docs/schema.md`, "Deleting completed jobs").
--
-- `mysqlq_completion_receipt`: one row per transaction in which a worker deleted the rows of
-- jobs it completed, keyed by a token the worker made for that write (the same on each retry of
-- it). `missed` lists, comma-separated, the jobs the write carried but did not delete (they were
-- no longer the worker's, or are kept as `completed`); NULL: none. A write retried after its
-- COMMIT reply was lost reads its receipt to tell the rows it deleted itself from rows another
-- worker or an operator removed. The worker deletes a receipt once its write's outcome is known;
-- the leader deletes those left behind (a worker that died) after a day.
--
-- No foreign keys, as everywhere. Re-runnable: IF NOT EXISTS.

CREATE TABLE IF NOT EXISTS mysqlq_completion_receipt (
  token CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  missed TEXT NULL,
  created_at DATETIME(6) NOT NULL,
  PRIMARY KEY (token),
  KEY idx_receipt_created (created_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
