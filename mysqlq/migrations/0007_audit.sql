-- mysqlq schema, version 7: the audit trail of operator actions.
--
-- `mysqlq_audit`: one row per operator action (cancel, retry, discard, delete, pause, resume,
-- purge) taken through `mysqlq::admin::Admin`, `mysqlq-cli` or the dashboard: who (`actor`:
-- `--by`, the dashboard's user, or the library caller's name), when (`at`, UTC), what
-- (`action`), on which queue and kind, why (`reason`), what was asked (`detail`, e.g. the ids or
-- "every failed job of queue emails") and how many jobs it changed (`jobs`, counted in the same
-- transactions that changed them).
-- `mysqlq_audit_job`: one row per job an action changed, written in the transaction that
-- changed it, so a job's page lists exactly the actions that touched it (a purge records only
-- its count). Both are pruned by the leader with the failed jobs' retention. No foreign keys, as
-- for `mysqlq_job_attempt`.

CREATE TABLE IF NOT EXISTS mysqlq_audit (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  at DATETIME(6) NOT NULL,
  actor VARCHAR(128) NOT NULL,
  action VARCHAR(32) NOT NULL,
  queue_name VARCHAR(255) NULL,
  kind VARCHAR(255) NULL,
  jobs BIGINT UNSIGNED NOT NULL DEFAULT 0,
  reason VARCHAR(1024) NULL,
  detail VARCHAR(1024) NULL,
  PRIMARY KEY (id),
  KEY idx_audit_at (at),
  KEY idx_audit_queue (queue_name, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS mysqlq_audit_job (
  job_id BIGINT UNSIGNED NOT NULL,
  audit_id BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (job_id, audit_id),
  KEY idx_audit_job_audit (audit_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
