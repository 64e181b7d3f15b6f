//! The raw-SQL baseline of `mysqlq-bench`, and the bench's own bookkeeping statements.
//!
//! The baseline is what a team would write by hand from the source article, with no framework:
//! a plain single-row INSERT, a hand-written multi-row INSERT, the article's claim transaction
//! (`SELECT id … FOR UPDATE SKIP LOCKED`, `UPDATE … SET status = 'processing'`, `COMMIT`, at
//! READ COMMITTED) and one token-guarded completion statement per claimed batch. It is
//! deliberately not mysqlq's `store` (that is what it is measured against), so it lives here,
//! in the bench, and nothing of it ships in the library. The statements carry
//! `/* mysqlq:bench_… */` tags; every value is bound (database names, which cannot be, are
//! checked against `mysqlq_bench_[a-z0-9_]+` first).

use std::fmt::Write as _;

use sqlx::{AssertSqlSafe, Connection, MySqlConnection, Row};

use crate::indexes::{Change, RowWrite};

/// Checks a scratch database name: `mysqlq_bench_` followed by lowercase letters, digits or `_`.
fn scratch_name(name: &str) -> Result<&str, sqlx::Error> {
    let ok = name.strip_prefix("mysqlq_bench_").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    }) && name.len() <= 64;
    if ok {
        Ok(name)
    } else {
        Err(sqlx::Error::InvalidArgument(format!(
            "`{name}` is not a bench scratch database name (mysqlq_bench_[a-z0-9_]+)"
        )))
    }
}

/// `bench_create_database`: creates the bench's scratch database.
pub(crate) async fn bench_create_database(
    conn: &mut MySqlConnection,
    name: &str,
) -> Result<(), sqlx::Error> {
    let name = scratch_name(name)?;
    sqlx::query(AssertSqlSafe(format!(
        "/* mysqlq:bench_create_database */ CREATE DATABASE `{name}` CHARACTER SET utf8mb4"
    )))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// `bench_drop_database`: drops the bench's scratch database (only names made by the bench),
/// waiting at most `lock_wait_secs` for metadata locks held by connections still open on it.
pub(crate) async fn bench_drop_database(
    conn: &mut MySqlConnection,
    name: &str,
    lock_wait_secs: u32,
) -> Result<(), sqlx::Error> {
    let name = scratch_name(name)?;
    sqlx::query(AssertSqlSafe(format!(
        "/* mysqlq:bench_drop_database */ SET SESSION lock_wait_timeout = {}",
        lock_wait_secs.max(1)
    )))
    .execute(&mut *conn)
    .await?;
    sqlx::query(AssertSqlSafe(format!(
        "/* mysqlq:bench_drop_database */ DROP DATABASE IF EXISTS `{name}`"
    )))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// `bench_reset`: empties `job_queue` between two measured runs (scratch database only).
pub(crate) async fn bench_reset(conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
    sqlx::query("/* mysqlq:bench_reset */ TRUNCATE TABLE job_queue")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// The server and the settings that decide its write throughput.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BenchServer {
    /// `VERSION()`.
    pub(crate) version: String,
    /// `@@innodb_flush_log_at_trx_commit`.
    pub(crate) flush_log_at_trx_commit: i64,
    /// `@@sync_binlog`.
    pub(crate) sync_binlog: i64,
    /// `@@log_bin`.
    pub(crate) log_bin: i64,
    /// `@@binlog_format`.
    pub(crate) binlog_format: String,
    /// `@@innodb_buffer_pool_size`, bytes.
    pub(crate) buffer_pool_bytes: i64,
    /// `@@max_connections`.
    pub(crate) max_connections: i64,
}

/// `bench_server`: the server's version and write-path settings.
pub(crate) async fn bench_server(conn: &mut MySqlConnection) -> Result<BenchServer, sqlx::Error> {
    let row = sqlx::query(
        "/* mysqlq:bench_server */ SELECT VERSION() AS version, \
         CAST(@@innodb_flush_log_at_trx_commit AS SIGNED) AS flush, \
         CAST(@@sync_binlog AS SIGNED) AS sync_binlog, CAST(@@log_bin AS SIGNED) AS log_bin, \
         CAST(@@binlog_format AS CHAR) AS binlog_format, \
         CAST(@@innodb_buffer_pool_size AS SIGNED) AS buffer_pool, \
         CAST(@@max_connections AS SIGNED) AS max_connections",
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(BenchServer {
        version: row.try_get("version")?,
        flush_log_at_trx_commit: row.try_get("flush")?,
        sync_binlog: row.try_get("sync_binlog")?,
        log_bin: row.try_get("log_bin")?,
        binlog_format: row.try_get("binlog_format")?,
        buffer_pool_bytes: row.try_get("buffer_pool")?,
        max_connections: row.try_get("max_connections")?,
    })
}

/// Rows per hand-written multi-row INSERT of the baseline: the chunk size of mysqlq's own
/// `enqueue_many` (`INSERT_CHUNK_ROWS` in `mysqlq/src/store/insert.rs`), so both sides send the
/// same statements' worth of rows.
pub(crate) const BASELINE_CHUNK_ROWS: usize = 500;

const BASELINE_INSERT_COLUMNS: &str = "INSERT INTO job_queue (queue_name, kind, payload, status, \
                                       available_at, created_at) VALUES ";
const BASELINE_INSERT_VALUES: &str = "(?, ?, ?, 'pending', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))";

/// Baseline `bench_insert_one`: one plain autocommit INSERT; returns the new id.
pub(crate) async fn bench_insert_one(
    conn: &mut MySqlConnection,
    queue: &str,
    kind: &str,
    payload: &str,
) -> Result<u64, sqlx::Error> {
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:bench_insert_one */ {BASELINE_INSERT_COLUMNS}{BASELINE_INSERT_VALUES}"
    ));
    let done = sqlx::query(sql)
        .bind(queue)
        .bind(kind)
        .bind(payload)
        .execute(&mut *conn)
        .await?;
    Ok(done.last_insert_id())
}

/// Baseline `bench_insert_many`: one hand-written multi-row INSERT of every payload (the caller
/// chunks). Returns the rows inserted.
pub(crate) async fn bench_insert_many(
    conn: &mut MySqlConnection,
    queue: &str,
    kind: &str,
    payloads: &[String],
) -> Result<u64, sqlx::Error> {
    if payloads.is_empty() {
        return Ok(0);
    }
    let mut sql = String::with_capacity(80 + payloads.len() * (BASELINE_INSERT_VALUES.len() + 2));
    sql.push_str("/* mysqlq:bench_insert_many */ ");
    sql.push_str(BASELINE_INSERT_COLUMNS);
    for i in 0..payloads.len() {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(BASELINE_INSERT_VALUES);
    }
    let mut q = sqlx::query(AssertSqlSafe(sql));
    for p in payloads {
        q = q.bind(queue).bind(kind).bind(p.as_str());
    }
    Ok(q.execute(&mut *conn).await?.rows_affected())
}

fn id_list(n: usize) -> String {
    let mut s = String::with_capacity(n * 3);
    for i in 0..n {
        let _ = write!(s, "{}?", if i == 0 { "" } else { ", " });
    }
    s
}

/// What the baseline's claim UPDATE sets (its binds: token, worker, lease seconds).
const BENCH_CLAIM_SET: &str = "status = 'processing', claim_token = ?, locked_by = ?, \
     lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL ? SECOND, attempts = attempts + 1";

/// What the baseline's completion sets.
const BENCH_COMPLETE_SET: &str = "status = 'completed', finished_at = UTC_TIMESTAMP(6)";

/// The raw loop's claim UPDATE ([`BENCH_CLAIM_SET`]), on either table.
const BENCH_CLAIM_WRITE: RowWrite = RowWrite {
    statement: "claim UPDATE",
    change: Change::Update(&[
        "status",
        "claim_token",
        "locked_by",
        "lease_expires_at",
        "attempts",
    ]),
};

/// The row writes of one job drained by the baseline: its claim's UPDATE and its completion's
/// (for the index entries per job; a unit test keeps the columns those of the SQL).
pub(crate) const BENCH_DRAIN_WRITES: &[RowWrite] = &[
    BENCH_CLAIM_WRITE,
    RowWrite {
        statement: "completion UPDATE",
        change: Change::Update(&["status", "finished_at"]),
    },
];

/// The table a raw loop drains: the framework's `job_queue` (the baseline of the ratios), or
/// the job-queue article's own table (`article_job_queue`, [`ARTICLE_TABLE`]: its two
/// secondary indexes only), drained with the article's own claim order and completion — what
/// the machine does for the article's schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RawTable {
    JobQueue,
    Article,
}

impl RawTable {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::JobQueue => "job_queue",
            Self::Article => "article_job_queue",
        }
    }

    /// The claim's order: the framework's index has `priority`; the article's table has none.
    fn order_by(self) -> &'static str {
        match self {
            Self::JobQueue => "priority, available_at, id",
            Self::Article => "available_at, id",
        }
    }

    fn complete_set(self) -> &'static str {
        match self {
            Self::JobQueue => BENCH_COMPLETE_SET,
            Self::Article => ARTICLE_COMPLETE_SET,
        }
    }

    /// The row writes of one drained job.
    pub(crate) fn writes(self) -> &'static [RowWrite] {
        match self {
            Self::JobQueue => BENCH_DRAIN_WRITES,
            Self::Article => ARTICLE_DRAIN_WRITES,
        }
    }
}

/// The job-queue article's table, as the article writes it (README, "Sources"), beside the
/// framework's in the scratch database.
pub(crate) const ARTICLE_TABLE: &str = "/* mysqlq:bench_article_table */ \
    CREATE TABLE IF NOT EXISTS article_job_queue ( \
      id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, \
      queue_name VARCHAR(64) NOT NULL DEFAULT 'default', \
      payload JSON NOT NULL, \
      status ENUM('pending', 'processing', 'completed', 'failed') NOT NULL DEFAULT 'pending', \
      available_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), \
      locked_by VARCHAR(128) NULL, \
      claim_token CHAR(36) NULL, \
      lease_expires_at DATETIME(6) NULL, \
      attempts INT UNSIGNED NOT NULL DEFAULT 0, \
      max_attempts INT UNSIGNED NOT NULL DEFAULT 5, \
      last_error TEXT NULL, \
      created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), \
      updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6), \
      PRIMARY KEY (id), \
      KEY idx_job_claim (queue_name, status, available_at, id), \
      KEY idx_job_recover (status, lease_expires_at) \
    ) ENGINE = InnoDB";

/// The article's completion.
const ARTICLE_COMPLETE_SET: &str =
    "status = 'completed', locked_by = NULL, claim_token = NULL, lease_expires_at = NULL";

/// [`BENCH_DRAIN_WRITES`] on the article's table.
pub(crate) const ARTICLE_DRAIN_WRITES: &[RowWrite] = &[
    BENCH_CLAIM_WRITE,
    RowWrite {
        statement: "completion UPDATE",
        change: Change::Update(&["status", "locked_by", "claim_token", "lease_expires_at"]),
    },
];

/// `bench_article_fill`: the article's table gets the rows of `job_queue` (same ids and
/// payloads, all `pending`), and `job_queue` is emptied, so that a raw loop on the article's
/// table drains the jobs a run on `job_queue` would.
pub(crate) async fn bench_article_fill(conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
    for sql in [
        ARTICLE_TABLE,
        "/* mysqlq:bench_article_fill */ TRUNCATE TABLE article_job_queue",
        "/* mysqlq:bench_article_fill */ INSERT INTO article_job_queue \
           (id, queue_name, payload, available_at, created_at) \
         SELECT id, queue_name, payload, available_at, created_at FROM job_queue",
        "/* mysqlq:bench_article_fill */ TRUNCATE TABLE job_queue",
    ] {
        sqlx::query(sql).execute(&mut *conn).await?;
    }
    Ok(())
}

/// Baseline `bench_claim`: the article's claim transaction at READ COMMITTED. Returns the ids
/// now owned under `token` (empty when nothing is ready). A deadlock or lock wait timeout on any
/// statement is returned after the rollback; the caller redoes the whole claim.
pub(crate) async fn bench_claim(
    conn: &mut MySqlConnection,
    table: RawTable,
    queue: &str,
    limit: u32,
    worker: &str,
    token: &str,
    lease_secs: u32,
) -> Result<Vec<u64>, sqlx::Error> {
    let mut tx = conn
        .begin_with(
            "/* mysqlq:bench_claim */ SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION",
        )
        .await?;
    let ids: Vec<u64> = sqlx::query_scalar(AssertSqlSafe(format!(
        "/* mysqlq:bench_claim */ SELECT id FROM {} \
         WHERE queue_name = ? AND status = 'pending' AND available_at <= UTC_TIMESTAMP(6) \
         ORDER BY {} LIMIT ? FOR UPDATE SKIP LOCKED",
        table.name(),
        table.order_by()
    )))
    .bind(queue)
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?;
    if ids.is_empty() {
        tx.commit().await?;
        return Ok(ids);
    }
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:bench_claim */ UPDATE {} SET {BENCH_CLAIM_SET} \
         WHERE id IN ({}) AND status = 'pending'",
        table.name(),
        id_list(ids.len())
    ));
    let mut q = sqlx::query(sql).bind(token).bind(worker).bind(lease_secs);
    for id in &ids {
        q = q.bind(*id);
    }
    let updated = q.execute(&mut *tx).await?.rows_affected();
    if updated != ids.len() as u64 {
        tx.rollback().await?;
        return Err(sqlx::Error::Protocol(format!(
            "bench claim locked {} rows but updated {updated} (rolled back)",
            ids.len()
        )));
    }
    tx.commit().await?;
    Ok(ids)
}

/// Baseline `bench_complete`: one token-guarded completion statement for a claimed batch.
/// Returns the rows changed (fewer than `ids` means ownership was lost).
pub(crate) async fn bench_complete(
    conn: &mut MySqlConnection,
    table: RawTable,
    ids: &[u64],
    token: &str,
) -> Result<u64, sqlx::Error> {
    if ids.is_empty() {
        return Ok(0);
    }
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:bench_complete */ UPDATE {} SET {} \
         WHERE id IN ({}) AND status = 'processing' AND claim_token = ?",
        table.name(),
        table.complete_set(),
        id_list(ids.len())
    ));
    let mut q = sqlx::query(sql);
    for id in ids {
        q = q.bind(*id);
    }
    Ok(q.bind(token).execute(&mut *conn).await?.rows_affected())
}

/// What the bench checks after a run, for one queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BenchCounts {
    /// Rows of the queue.
    pub(crate) rows: i64,
    /// Rows `completed`.
    pub(crate) completed: i64,
    /// Sum of `attempts` (each row claimed exactly once: equals `rows`).
    pub(crate) attempts: i64,
}

/// `bench_counts`: rows, completed rows and claims of `queue`.
pub(crate) async fn bench_counts(
    conn: &mut MySqlConnection,
    table: RawTable,
    queue: &str,
) -> Result<BenchCounts, sqlx::Error> {
    let row = sqlx::query(AssertSqlSafe(format!(
        "/* mysqlq:bench_counts */ SELECT COUNT(*) AS n, \
         CAST(IFNULL(SUM(status = 'completed'), 0) AS SIGNED) AS completed, \
         CAST(IFNULL(SUM(attempts), 0) AS SIGNED) AS attempts \
         FROM {} WHERE queue_name = ?",
        table.name()
    )))
    .bind(queue)
    .fetch_one(&mut *conn)
    .await?;
    Ok(BenchCounts {
        rows: row.try_get("n")?,
        completed: row.try_get("completed")?,
        attempts: row.try_get("attempts")?,
    })
}

/// `bench_now_us`: the database clock (UTC), microseconds since the Unix epoch.
pub(crate) async fn bench_now_us(conn: &mut MySqlConnection) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "/* mysqlq:bench_now_us */ SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))",
    )
    .fetch_one(&mut *conn)
    .await
}

/// One row of the periodic jobs' ledger, as the periodic scenario reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BenchTick {
    /// The tick, seconds since the Unix epoch (UTC, the database clock).
    pub(crate) tick_s: i64,
    /// The job the tick enqueued (`None`: the schedule's baseline, recorded without a job).
    pub(crate) job_id: Option<u64>,
    /// When that job's row was written (`created_at`, the database clock), minus the tick, in
    /// microseconds; `None` when the row is not in `job_queue`.
    pub(crate) late_us: Option<i64>,
}

/// `bench_ticks`: the ledger rows of schedule `name`, oldest first, each with its job's lateness.
pub(crate) async fn bench_ticks(
    conn: &mut MySqlConnection,
    name: &str,
) -> Result<Vec<BenchTick>, sqlx::Error> {
    let rows = sqlx::query(
        "/* mysqlq:bench_ticks */ SELECT TIMESTAMPDIFF(SECOND, '1970-01-01 00:00:00', c.tick) AS tick_s, \
         c.job_id, TIMESTAMPDIFF(MICROSECOND, c.tick, j.created_at) AS late_us \
         FROM mysqlq_cron c LEFT JOIN job_queue j ON j.id = c.job_id \
         WHERE c.name = ? ORDER BY c.tick",
    )
    .bind(name)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(BenchTick {
                tick_s: r.try_get("tick_s")?,
                job_id: r.try_get("job_id")?,
                late_us: r.try_get("late_us")?,
            })
        })
        .collect()
}

/// Server-wide counters the bench reads around a drain run and reports per job
/// (`SHOW GLOBAL STATUS`; other sessions on the server count too): statements, rows, handler
/// calls (each row read, written, updated or deleted by a statement), commits, fsyncs, row lock
/// waits. Read by name: a counter the server lacks is reported as missing, not as 0 — MariaDB
/// 10.11 has no `Innodb_rows_*` (MySQL 8 has them) and no `Innodb_os_log_fsyncs` (gone from
/// MariaDB 10.8), MySQL has no `Handler_read_retry` or `Handler_read_rnd_deleted`.
pub(crate) const BENCH_STATUS: [&str; 27] = [
    "Questions",
    "Com_select",
    "Com_insert",
    "Com_update",
    "Com_delete",
    "Com_commit",
    "Innodb_rows_read",
    "Innodb_rows_inserted",
    "Innodb_rows_updated",
    "Innodb_rows_deleted",
    "Handler_read_first",
    "Handler_read_key",
    "Handler_read_last",
    "Handler_read_next",
    "Handler_read_prev",
    "Handler_read_retry",
    "Handler_read_rnd",
    "Handler_read_rnd_deleted",
    "Handler_read_rnd_next",
    "Handler_write",
    "Handler_update",
    "Handler_delete",
    "Handler_commit",
    "Innodb_data_fsyncs",
    "Innodb_os_log_fsyncs",
    "Innodb_row_lock_waits",
    "Innodb_row_lock_time",
];

/// `bench_server_pid`: the server's process id, from its pid file (`None` when the server does
/// not run on this host, or its pid file cannot be read: a server elsewhere, another user's).
/// A process of that id must exist here and be a `mariadbd` or `mysqld`.
pub(crate) async fn bench_server_pid(conn: &mut MySqlConnection) -> Option<u32> {
    let file: Option<String> =
        sqlx::query_scalar("/* mysqlq:bench_server_pid */ SELECT @@pid_file")
            .fetch_one(&mut *conn)
            .await
            .ok()?;
    let pid: u32 = std::fs::read_to_string(file?).ok()?.trim().parse().ok()?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    matches!(comm.trim(), "mariadbd" | "mysqld").then_some(pid)
}

/// `bench_status`: the [`BENCH_STATUS`] counters, in that order (`None` for one the server
/// lacks).
pub(crate) async fn bench_status(
    conn: &mut MySqlConnection,
) -> Result<Vec<Option<i64>>, sqlx::Error> {
    bench_status_of(conn, &BENCH_STATUS).await
}

/// `bench_status_of`: the server's global status counters `names`, in that order (`None` for
/// one the server lacks).
pub(crate) async fn bench_status_of(
    conn: &mut MySqlConnection,
    names: &[&str],
) -> Result<Vec<Option<i64>>, sqlx::Error> {
    // `SHOW GLOBAL STATUS` exists on MariaDB and MySQL alike (MySQL 8 has no
    // information_schema.GLOBAL_STATUS); the few hundred rows are filtered here.
    let rows = sqlx::raw_sql("/* mysqlq:bench_status */ SHOW GLOBAL STATUS")
        .fetch_all(&mut *conn)
        .await?;
    let mut out = vec![None; names.len()];
    for r in rows {
        let name: String = r.try_get(0)?;
        if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(&name)) {
            let value: String = r.try_get(1)?;
            out[i] = value.trim().parse().ok();
        }
    }
    Ok(out)
}

/// One key part of a secondary index of `job_queue`, or one column the server writes by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BenchIndexPart {
    /// The index.
    pub(crate) index: String,
    /// Its column (`None`: an expression, MySQL 8's functional key parts).
    pub(crate) column: Option<String>,
}

/// `bench_job_queue_indexes`: the key parts of `job_queue`'s secondary indexes in the current
/// database, in index order.
pub(crate) async fn bench_job_queue_indexes(
    conn: &mut MySqlConnection,
    table: RawTable,
) -> Result<Vec<BenchIndexPart>, sqlx::Error> {
    let rows = sqlx::query(
        "/* mysqlq:bench_job_queue_indexes */ SELECT CAST(INDEX_NAME AS CHAR) AS index_name, \
         CAST(COLUMN_NAME AS CHAR) AS column_name FROM information_schema.STATISTICS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND INDEX_NAME <> 'PRIMARY' \
         ORDER BY INDEX_NAME, SEQ_IN_INDEX",
    )
    .bind(table.name())
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(BenchIndexPart {
                index: r.try_get("index_name")?,
                column: r.try_get("column_name")?,
            })
        })
        .collect()
}

/// `bench_job_queue_columns`: every column of `job_queue` with its `EXTRA`
/// (`on update current_timestamp(6)`, `STORED GENERATED`, …; lowercased).
pub(crate) async fn bench_job_queue_columns(
    conn: &mut MySqlConnection,
    table: RawTable,
) -> Result<Vec<(String, String)>, sqlx::Error> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "/* mysqlq:bench_job_queue_columns */ SELECT CAST(COLUMN_NAME AS CHAR), \
         CAST(IFNULL(EXTRA, '') AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
    )
    .bind(table.name())
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(c, e)| (c, e.to_lowercase()))
        .collect())
}

/// The workflow tables, emptied with `job_queue` between two workflow runs (`job_queue`'s ids
/// restart, and an old edge must not name a new job).
const WORKFLOW_TABLES: [&str; 4] = [
    "mysqlq_workflow",
    "mysqlq_wf_step",
    "mysqlq_wf_edge",
    "mysqlq_wf_gate",
];

/// `bench_reset_workflows`: empties the workflow tables (scratch database only).
pub(crate) async fn bench_reset_workflows(conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
    for table in WORKFLOW_TABLES {
        sqlx::query(AssertSqlSafe(format!(
            "/* mysqlq:bench_reset_workflows */ TRUNCATE TABLE {table}"
        )))
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// `bench_ids`: the ids of the rows of `queue`, ascending.
pub(crate) async fn bench_ids(
    conn: &mut MySqlConnection,
    queue: &str,
) -> Result<Vec<u64>, sqlx::Error> {
    sqlx::query_scalar(
        "/* mysqlq:bench_ids */ SELECT id FROM job_queue WHERE queue_name = ? ORDER BY id",
    )
    .bind(queue)
    .fetch_all(&mut *conn)
    .await
}

/// `bench_last_finished_us`: the latest `finished_at` of `queue` (database clock, microseconds
/// since the Unix epoch; `None` when no row finished).
pub(crate) async fn bench_last_finished_us(
    conn: &mut MySqlConnection,
    queue: &str,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "/* mysqlq:bench_last_finished_us */ SELECT CAST(MAX(TIMESTAMPDIFF(MICROSECOND, \
         '1970-01-01 00:00:00', finished_at)) AS SIGNED) FROM job_queue WHERE queue_name = ?",
    )
    .bind(queue)
    .fetch_one(&mut *conn)
    .await
}

/// The steps of one name (a fan-out's, or one step per workflow of many workflows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BenchStepTimes {
    /// The step name.
    pub(crate) name: String,
    /// Steps of that name.
    pub(crate) steps: i64,
    /// Their latest `finished_at` (database clock, µs since the Unix epoch).
    pub(crate) last_finished_us: Option<i64>,
}

/// `bench_step_times`: every step name of every workflow, with its steps' latest `finished_at`.
pub(crate) async fn bench_step_times(
    conn: &mut MySqlConnection,
) -> Result<Vec<BenchStepTimes>, sqlx::Error> {
    let rows = sqlx::query(
        "/* mysqlq:bench_step_times */ SELECT s.name, COUNT(*) AS n, \
         CAST(MAX(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', j.finished_at)) AS SIGNED) AS last_us \
         FROM mysqlq_wf_step s JOIN job_queue j ON j.id = s.job_id GROUP BY s.name",
    )
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(BenchStepTimes {
                name: r.try_get("name")?,
                steps: r.try_get("n")?,
                last_finished_us: r.try_get("last_us")?,
            })
        })
        .collect()
}

/// One dependent step: when it was first claimed against when its last dependency finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BenchDepGap {
    /// The dependent's step name.
    pub(crate) name: String,
    /// Its dependencies (edges).
    pub(crate) deps: i64,
    /// Dependencies without a `finished_at`.
    pub(crate) unfinished: i64,
    /// Its `first_claimed_at` minus the latest `finished_at` of its dependencies, both on the
    /// database clock, in microseconds (`None`: never claimed).
    pub(crate) gap_us: Option<i64>,
}

/// `bench_dep_gaps`: every dependent step of every workflow with its [`BenchDepGap`].
pub(crate) async fn bench_dep_gaps(
    conn: &mut MySqlConnection,
) -> Result<Vec<BenchDepGap>, sqlx::Error> {
    let rows = sqlx::query(
        "/* mysqlq:bench_dep_gaps */ SELECT s.name, COUNT(*) AS deps, \
         CAST(IFNULL(SUM(d.finished_at IS NULL), 0) AS SIGNED) AS unfinished, \
         CAST(TIMESTAMPDIFF(MICROSECOND, MAX(d.finished_at), MIN(j.first_claimed_at)) AS SIGNED) AS gap_us \
         FROM mysqlq_wf_edge e JOIN job_queue d ON d.id = e.dep_id \
         JOIN job_queue j ON j.id = e.dependent_id JOIN mysqlq_wf_step s ON s.job_id = e.dependent_id \
         GROUP BY e.dependent_id, s.name",
    )
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(BenchDepGap {
                name: r.try_get("name")?,
                deps: r.try_get("deps")?,
                unfinished: r.try_get("unfinished")?,
                gap_us: r.try_get("gap_us")?,
            })
        })
        .collect()
}

/// `bench_rate_setup`: the rate scenario's start log, written by its worker processes.
pub(crate) async fn bench_rate_setup(conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
    sqlx::query(
        "/* mysqlq:bench_rate_setup */ CREATE TABLE IF NOT EXISTS bench_starts ( \
           seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, \
           job_id BIGINT UNSIGNED NOT NULL, \
           tag VARCHAR(32) NOT NULL, \
           us BIGINT NOT NULL, \
           worker SMALLINT UNSIGNED NOT NULL, \
           KEY idx_bench_starts_job (job_id) \
         ) ENGINE = InnoDB",
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// `bench_rate_reset`: empties the start log and the rate buckets (scratch database only; the
/// caller empties `job_queue`).
pub(crate) async fn bench_rate_reset(conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
    for statement in [
        "/* mysqlq:bench_rate_reset */ TRUNCATE TABLE bench_starts",
        "/* mysqlq:bench_rate_reset */ DELETE FROM mysqlq_rate_bucket",
    ] {
        sqlx::query(statement).execute(&mut *conn).await?;
    }
    Ok(())
}

/// `bench_rate_insert_starts`: handler starts `(job id, tag, µs)` of worker process `worker`.
pub(crate) async fn bench_rate_insert_starts(
    conn: &mut MySqlConnection,
    worker: u16,
    rows: &[(u64, &str, i64)],
) -> Result<(), sqlx::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut sql = String::from(
        "/* mysqlq:bench_rate_insert_starts */ INSERT INTO bench_starts (job_id, tag, us, worker) VALUES ",
    );
    for i in 0..rows.len() {
        sql.push_str(if i == 0 {
            "(?, ?, ?, ?)"
        } else {
            ", (?, ?, ?, ?)"
        });
    }
    let mut q = sqlx::query(AssertSqlSafe(sql));
    for (id, tag, us) in rows {
        q = q.bind(id).bind(*tag).bind(us).bind(worker);
    }
    q.execute(&mut *conn).await?;
    Ok(())
}

/// `bench_rate_starts`: every recorded start `(job id, tag, µs)`, in time order.
pub(crate) async fn bench_rate_starts(
    conn: &mut MySqlConnection,
) -> Result<Vec<(u64, String, i64)>, sqlx::Error> {
    sqlx::query_as(
        "/* mysqlq:bench_rate_starts */ SELECT job_id, tag, us FROM bench_starts ORDER BY us, seq",
    )
    .fetch_all(&mut *conn)
    .await
}

/// `bench_rate_start_of`: when job `id`'s handler started (µs; `None`: not recorded yet).
pub(crate) async fn bench_rate_start_of(
    conn: &mut MySqlConnection,
    id: u64,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "/* mysqlq:bench_rate_start_of */ SELECT MIN(us) FROM bench_starts WHERE job_id = ?",
    )
    .bind(id)
    .fetch_one(&mut *conn)
    .await
}

/// `bench_rate_claim_gaps`: per start of a job with a rate key, its tag and the time from its
/// first claim's UPDATE (`first_claimed_at`, database clock) to its handler's start (host
/// clock; the same clock when both run on one host), in µs.
pub(crate) async fn bench_rate_claim_gaps(
    conn: &mut MySqlConnection,
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    sqlx::query_as(
        "/* mysqlq:bench_rate_claim_gaps */ SELECT s.tag, \
         CAST(s.us - TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', j.first_claimed_at) AS SIGNED) \
         FROM bench_starts s JOIN job_queue j ON j.id = s.job_id \
         WHERE j.rate_key IS NOT NULL AND j.first_claimed_at IS NOT NULL",
    )
    .fetch_all(&mut *conn)
    .await
}

/// One rate bucket as the rate scenario reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BenchBucket {
    pub(crate) key: String,
    /// ε of its decisions (µs).
    pub(crate) slack_us: i64,
    /// Decisions written.
    pub(crate) decisions: i64,
    /// Until it opens again (µs; ≤ 0: open now).
    pub(crate) open_in_us: i64,
}

/// `bench_rate_buckets`: the key buckets of `queue`.
pub(crate) async fn bench_rate_buckets(
    conn: &mut MySqlConnection,
    queue: &str,
) -> Result<Vec<BenchBucket>, sqlx::Error> {
    let rows = sqlx::query(
        "/* mysqlq:bench_rate_buckets */ SELECT rate_key, CAST(slack_us AS SIGNED) AS slack_us, \
         CAST(decisions AS SIGNED) AS decisions, \
         CAST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), open_at) AS SIGNED) AS open_in_us \
         FROM mysqlq_rate_bucket WHERE queue_name = ? AND rate_key <> '' ORDER BY rate_key",
    )
    .bind(queue)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(BenchBucket {
                key: r.try_get("rate_key")?,
                slack_us: r.try_get("slack_us")?,
                decisions: r.try_get("decisions")?,
                open_in_us: r.try_get("open_in_us")?,
            })
        })
        .collect()
}

/// What is left in the rate scenario's queue after a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BenchRateRows {
    pub(crate) completed: i64,
    /// Completed rows whose `attempts` is not 1 (a wait for a limit must cost no attempt).
    pub(crate) completed_not_one_attempt: i64,
    /// Unlimited rows still `pending`.
    pub(crate) pending_plain: i64,
    /// Rows of any other status than `completed` and `pending`.
    pub(crate) other: i64,
}

/// `bench_rate_rows`: the statuses of `queue`'s rows.
pub(crate) async fn bench_rate_rows(
    conn: &mut MySqlConnection,
    queue: &str,
) -> Result<BenchRateRows, sqlx::Error> {
    let row = sqlx::query(
        "/* mysqlq:bench_rate_rows */ SELECT \
         CAST(IFNULL(SUM(status = 'completed'), 0) AS SIGNED) AS completed, \
         CAST(IFNULL(SUM(status = 'completed' AND attempts <> 1), 0) AS SIGNED) AS not_one, \
         CAST(IFNULL(SUM(status = 'pending' AND rate_key IS NULL), 0) AS SIGNED) AS pending_plain, \
         CAST(IFNULL(SUM(status NOT IN ('completed', 'pending')), 0) AS SIGNED) AS other \
         FROM job_queue WHERE queue_name = ?",
    )
    .bind(queue)
    .fetch_one(&mut *conn)
    .await?;
    Ok(BenchRateRows {
        completed: row.try_get("completed")?,
        completed_not_one_attempt: row.try_get("not_one")?,
        pending_plain: row.try_get("pending_plain")?,
        other: row.try_get("other")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_scratch_names_are_accepted() {
        assert!(scratch_name("mysqlq_bench_1a2b").is_ok());
        assert!(scratch_name("mysqlq_bench_").is_err());
        assert!(scratch_name("app").is_err());
        assert!(scratch_name("mysqlq_bench_x`; DROP").is_err());
        assert_eq!(id_list(3), "?, ?, ?");
    }

    /// The columns a `SET` list assigns.
    fn set_columns(set: &str) -> Vec<&str> {
        set.split(", ")
            .filter_map(|a| a.split_once(" = ").map(|(c, _)| c.trim()))
            .collect()
    }

    #[test]
    fn the_declared_writes_are_those_of_the_baseline_sql() {
        let declared = |i: usize| match BENCH_DRAIN_WRITES[i].change {
            Change::Update(c) => c.to_vec(),
            Change::Delete => Vec::new(),
        };
        assert_eq!(set_columns(BENCH_CLAIM_SET), declared(0));
        assert_eq!(set_columns(BENCH_COMPLETE_SET), declared(1));
    }

    #[test]
    fn the_article_tables_declared_writes_are_those_of_its_sql() {
        let declared = |i: usize| match RawTable::Article.writes()[i].change {
            Change::Update(c) => c.to_vec(),
            Change::Delete => Vec::new(),
        };
        assert_eq!(set_columns(BENCH_CLAIM_SET), declared(0));
        assert_eq!(set_columns(RawTable::Article.complete_set()), declared(1));
        assert_eq!(RawTable::JobQueue.writes(), BENCH_DRAIN_WRITES);
        // The article's table has two secondary indexes, on the columns its claim orders by.
        assert_eq!(ARTICLE_TABLE.matches(" KEY ").count(), 3, "{ARTICLE_TABLE}");
        assert!(ARTICLE_TABLE.contains("idx_job_claim (queue_name, status, available_at, id)"));
        assert_eq!(RawTable::Article.order_by(), "available_at, id");
    }
}
