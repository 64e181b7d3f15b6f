-- mysqlq schema, version 8: workflows and batches (`mysqlq::workflow`, `docs/workflows.md`).
--
-- A step of a workflow is a job row with `workflow_id` set. A step with dependencies is inserted
-- `waiting` (appended to the ENUM: a metadata change); claims, heartbeats, the reaper and the
-- Redis relay only ever read `pending` and `processing` rows, so they never see it. It becomes
-- `pending` (released) in the transaction that settles its last dependency.
--
-- `mysqlq_wf_step`: a step's name (shared by a fan-out's steps, told apart by `ordinal`; `scope`
-- 0 for steps enqueued with the workflow, else the id of the running step that added it), its
-- upstream rules, and the result its handler recorded (`ctx.record`, at most 16 KiB of JSON) for
-- its dependents to read (`ctx.upstream`).
-- `mysqlq_wf_edge`: one row per dependency. `open` until settled; `met` once the dependency
-- completed (or ended failed/cancelled and the dependent ignores that); `broken` when the
-- dependent was cancelled because of it. An edge of dependency `d` is written only by a
-- transaction holding the row lock of job `d`.
-- `mysqlq_wf_gate`: a dependent counts its unsettled edges in blocks of at most 64 (block `i / 64`
-- of its edges in dependency id order), so the completions of a 10,000-wide fan-out decrement
-- 157 different rows, not one; block 0 is the head and also counts the blocks > 0 still open.
-- The dependent is released when the head's `remaining` and `open_blocks` both reach 0.
-- `INT UNSIGNED`: a double decrement fails (error 1690) instead of wrapping.
--
-- No foreign keys, as for `mysqlq_job_attempt`. Re-runnable: 1060/1061 mean "applied already";
-- the MODIFY states the full definition.

ALTER TABLE job_queue MODIFY status ENUM('pending', 'processing', 'completed', 'failed',
  'cancelled', 'waiting') NOT NULL DEFAULT 'pending';

ALTER TABLE job_queue ADD COLUMN workflow_id BIGINT UNSIGNED NULL;

-- A `waiting` step holds its dedupe key as a never-claimed `pending` job does (a workflow whose
-- step's key is held is refused whole; an operator's retry does not revive a step whose key
-- another job took meanwhile). The definition of version 5 plus the `waiting` case; redefining
-- a STORED column rebuilds the table once.
ALTER TABLE job_queue
  MODIFY dedupe_active VARCHAR(191) CHARACTER SET utf8mb4 COLLATE {key_collation} GENERATED ALWAYS AS (
    CASE
      WHEN status = 'pending' AND (dedupe_until = 'finished' OR first_claimed_at IS NULL) THEN dedupe_key
      WHEN status = 'waiting' THEN dedupe_key
      WHEN status = 'processing' AND dedupe_until = 'finished' THEN dedupe_key
      WHEN status = 'completed' AND dedupe_window_us IS NOT NULL THEN dedupe_key
    END
  ) STORED;

ALTER TABLE job_queue ADD KEY idx_job_workflow (workflow_id, status);

CREATE TABLE IF NOT EXISTS mysqlq_workflow (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  kind ENUM('workflow', 'batch') NOT NULL,
  name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE {key_collation} NOT NULL,
  state ENUM('running', 'completed', 'failed', 'cancelled') NOT NULL DEFAULT 'running',
  steps INT UNSIGNED NOT NULL,
  created_at DATETIME(6) NOT NULL,
  finished_at DATETIME(6) NULL,
  PRIMARY KEY (id),
  KEY idx_workflow_state (state, kind, id),
  KEY idx_workflow_finished (state, finished_at),
  KEY idx_workflow_name (name, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS mysqlq_wf_step (
  job_id BIGINT UNSIGNED NOT NULL,
  workflow_id BIGINT UNSIGNED NOT NULL,
  name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE {key_collation} NOT NULL,
  scope BIGINT UNSIGNED NOT NULL DEFAULT 0,
  ordinal INT UNSIGNED NOT NULL DEFAULT 0,
  ignore_failed TINYINT(1) NOT NULL DEFAULT 0,
  ignore_cancelled TINYINT(1) NOT NULL DEFAULT 0,
  result JSON NULL,
  result_bytes INT UNSIGNED NULL,
  PRIMARY KEY (job_id),
  UNIQUE KEY uq_wf_step_name (workflow_id, name, scope, ordinal)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS mysqlq_wf_edge (
  dep_id BIGINT UNSIGNED NOT NULL,
  dependent_id BIGINT UNSIGNED NOT NULL,
  block INT UNSIGNED NOT NULL,
  state ENUM('open', 'met', 'broken') NOT NULL DEFAULT 'open',
  PRIMARY KEY (dep_id, dependent_id),
  KEY idx_wf_edge_dependent (dependent_id, state)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS mysqlq_wf_gate (
  step_id BIGINT UNSIGNED NOT NULL,
  block INT UNSIGNED NOT NULL,
  remaining INT UNSIGNED NOT NULL,
  open_blocks INT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (step_id, block)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
